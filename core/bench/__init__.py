"""Benchmark: plain generate, the plain loop, lookahead settings and prompt lookup, side by side."""
