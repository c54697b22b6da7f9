"""The toolbar's controls: decoding mode (Auto, Plain, Lookahead) and sampling presets."""
