#!/bin/sh
# /usr/bin/lookahead-chat: start the app installed under /opt/lookahead-chat.
exec /opt/lookahead-chat/lookahead-chat "$@"
