"""The chat: its controller, the message view and widgets, the composer, Markdown, the chat list, system prompts."""
