"""Placeholder: the airflow adapter lands with its issue."""
