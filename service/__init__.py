"""The API process and what it shares with the workers."""
