"""Markdown to the HTML subset Qt's rich text renders, with highlighted code blocks and copy links."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

COPY_SCHEME = "copy"  # code block i has a link "copy:i"
TABLE_OPEN = '<table border="1" cellspacing="0" cellpadding="4" style="border-collapse: collapse;">\n'


@dataclass(frozen=True)
class Palette:
    """Colours of rendered Markdown for one theme."""

    code_background: str
    code_header: str
    link: str
    pygments_style: str


WARM_LANGUAGES = ("python", "bash", "javascript", "json", "c")

LIGHT = Palette("#f3f4f6", "#6b7280", "#2563eb", "friendly")
DARK = Palette("#1e2230", "#9ca3af", "#7aa2f7", "monokai")


@dataclass
class Rendered:
    """HTML for a message and the source text of each of its code blocks (for the copy links)."""

    html: str
    code_blocks: list[str] = field(default_factory=list)


class MarkdownRenderer:
    """Renders CommonMark (plus tables and strikethrough); raw HTML in the text is shown as text."""

    def __init__(self, palette: Palette = LIGHT) -> None:
        self.palette = palette
        self._formatter = HtmlFormatter(nowrap=True, noclasses=True, style=palette.pygments_style)
        self._md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])

        def code_block(renderer: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
            return self._code_block(tokens[idx].info, tokens[idx].content, env)

        self._md.add_render_rule("fence", code_block)
        self._md.add_render_rule("code_block", code_block)

    def warm_up(self) -> None:
        """Import the lexers and styles once now, so the first streamed code block does not stall."""
        for language in WARM_LANGUAGES:
            self.render(f"```{language}\nx = 1\n```\n")

    def render(self, text: str) -> Rendered:
        env: dict[str, Any] = {"code_blocks": []}
        body = self._md.render(text, env).replace("<table>\n", TABLE_OPEN)
        return Rendered(body, env["code_blocks"])

    def _code_block(self, info: str, code: str, env: dict[str, Any]) -> str:
        language = info.strip().split()[0] if info.strip() else ""
        env["code_blocks"].append(code.rstrip("\n"))
        number = len(env["code_blocks"]) - 1
        try:
            lexer = get_lexer_by_name(language) if language else TextLexer()
        except ClassNotFound:
            lexer = TextLexer()
        body = highlight(code, lexer, self._formatter).rstrip("\n")
        p = self.palette
        return (
            f'<table width="100%" cellspacing="0" cellpadding="6" bgcolor="{p.code_background}" style="margin: 4px 0;">'
            f'<tr><td><span style="color: {p.code_header}; font-size: small;">{html.escape(language or "code")}</span>'
            f'&nbsp;&nbsp;<a href="{COPY_SCHEME}:{number}" style="color: {p.link}; font-size: small;">Copy</a></td></tr>'
            f'<tr><td><pre style="white-space: pre-wrap; margin: 0;">{body}</pre></td></tr></table>'
        )
