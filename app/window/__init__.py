"""The main window and what belongs to it alone: status bar, notices, dialogs, shortcuts, theme, start-up."""
