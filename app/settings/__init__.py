"""Settings in the window: the settings dialog and its hub download."""
