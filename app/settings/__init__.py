"""Settings in the window: the settings in use (with a change signal), the settings dialog and its hub download."""
