"""Loading the base model and generating from it."""
