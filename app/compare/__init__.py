"""Compare mode: plain and lookahead decoding side by side on one prompt, and the charts it draws."""
