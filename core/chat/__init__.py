"""Chat: prompt building with context limits, conversation history."""
