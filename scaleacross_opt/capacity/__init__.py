"""Capacity planning: sweeps over instance variants (local processes or Ray) and requirement queries."""
