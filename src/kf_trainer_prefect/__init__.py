"""Placeholder: the prefect adapter lands with its issue."""
