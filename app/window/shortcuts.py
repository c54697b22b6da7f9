"""The keyboard shortcuts, in one table the window binds and the Help dialog lists."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shortcut:
    name: str  # the window's action name
    keys: str  # QKeySequence text
    description: str


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut("new_chat", "Ctrl+N", "New chat"),
    Shortcut("send", "Ctrl+Return", "Send the message (Enter in the message box)"),
    Shortcut("stop", "Esc", "Stop the answer (or cancel editing)"),
    Shortcut("regenerate", "Ctrl+R", "Regenerate the last answer (the old one stays as a branch)"),
    Shortcut("edit_last", "Ctrl+E", "Edit your last message and resend it as a new branch"),
    Shortcut("copy_last", "Ctrl+Shift+C", "Copy the last answer"),
    Shortcut("search", "Ctrl+F", "Search chats"),
    Shortcut("toggle_mode", "Ctrl+L", "Next decoding mode: Auto, Plain, Lookahead, Auto again"),
    Shortcut("settings", "Ctrl+,", "Settings"),
    Shortcut("rename", "F2", "Rename the chat"),
    Shortcut("delete", "Ctrl+Shift+Delete", "Delete the chat"),
    Shortcut("help", "F1", "Keyboard shortcuts"),
    Shortcut("quit", "Ctrl+Q", "Quit"),
)
