"""Discrete-event step simulator (engine) and its report / trace front end."""
