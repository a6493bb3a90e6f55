"""A report's figure captions as a paper takes them: captions.md (Markdown, a figure and its caption each)
and captions.tex (a LaTeX figure environment each, ASCII only, the caption escaped), beside the figures."""

import os
from typing import Sequence, Tuple

MARKDOWN = "captions.md"
LATEX = "captions.tex"
# LaTeX's special characters and the non-ASCII ones captions use, as LaTeX writes them (outside math)
LATEX_TEXT = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "Δ": r"$\Delta$",
    "α": r"$\alpha$",
    "−": "$-$",
    "–": "--",
    "·": r"$\cdot$",
    "±": r"$\pm$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "×": r"$\times$",
}


def latex(text: str) -> str:
    """`text` as LaTeX text: special characters escaped, the captions' symbols as math, other non-ASCII
    characters as `?` (a caption's words are ASCII; a name that is not would break the build)."""
    return "".join(LATEX_TEXT.get(c, c if c.isascii() else "?") for c in text)


def captions_markdown(study: str, figures: Sequence[Tuple[str, str]]) -> str:
    """captions.md: per (name, caption), the figure's PNG and its caption."""
    parts = [f"# Figures of {study}\n"]
    for name, caption in figures:
        parts.append(f"## {name}\n\n![{name}]({name}.png)\n\n{caption}\n\nFiles: {name}.pdf, {name}.svg, {name}.csv\n")
    return "\n".join(parts)


def captions_latex(figures: Sequence[Tuple[str, str]]) -> str:
    """captions.tex: per (name, caption), a figure environment of name.pdf, its caption and label fig:name."""
    parts = ["% hpstudy report figures: \\input{captions} or copy a figure environment (needs graphicx)\n"]
    for name, caption in figures:
        parts.append(
            "\\begin{figure}\n  \\centering\n"
            f"  \\includegraphics{{{name}.pdf}}\n"
            f"  \\caption{{{latex(caption)}}}\n"
            f"  \\label{{fig:{name}}}\n"
            "\\end{figure}\n"
        )
    return "\n".join(parts)


def write_captions(out: str, study: str, figures: Sequence[Tuple[str, str]]) -> None:
    """Write captions.md and captions.tex into the report folder `out` (nothing where no figure was drawn)."""
    if not figures:
        return
    with open(os.path.join(out, MARKDOWN), "w") as f:
        f.write(captions_markdown(study, figures))
    with open(os.path.join(out, LATEX), "w") as f:
        f.write(captions_latex(figures))
