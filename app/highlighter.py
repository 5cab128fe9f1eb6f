"""Python syntax highlighting for the export preview."""

from __future__ import annotations

import keyword
import re

from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextDocument


def _format(colour: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colour))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


class PythonHighlighter(QSyntaxHighlighter):
    """Keywords, strings, numbers and comments; JSON reads well with the same rules."""

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        words = "|".join([*keyword.kwlist, "true", "false", "null"])
        self.rules = [
            (re.compile(rf"\b({words})\b"), _format("#7c3aed", bold=True)),
            (re.compile(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b"), _format("#b45309")),
            (re.compile(r"\bdef\s+(\w+)"), _format("#2563eb", bold=True)),
            (re.compile(r"'[^'\\]*(\\.[^'\\]*)*'|\"[^\"\\]*(\\.[^\"\\]*)*\""), _format("#15803d")),
            (re.compile(r"#[^\n]*"), _format("#6b7280", italic=True)),
        ]

    def highlightBlock(self, text: str) -> None:
        for pattern, fmt in self.rules:
            for match in pattern.finditer(text):
                self.setFormat(match.start(), match.end() - match.start(), fmt)
