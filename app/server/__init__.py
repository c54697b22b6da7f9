"""The window's local OpenAI-compatible server: running it to match the settings, and its status-bar indicator."""
