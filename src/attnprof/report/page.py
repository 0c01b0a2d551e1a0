"""The HTML page every report draws (one template) and the pieces the pages share: a section of tables, a
number cell, a safe link, the device line, the plots section. html.py (runs, sweeps, analyses),
distributed.py (several ranks) and history_page.py build their sections from these."""

from __future__ import annotations

from urllib.parse import quote

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from attnprof.units import count
from attnprof.version import __version__


def render(title: str, subtitle: list[str], sections: list[dict]) -> str:
    env = Environment(loader=PackageLoader("attnprof.report", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    page = {"title": title, "subtitle": subtitle, "sections": sections, "version": __version__}
    return env.get_template("report.html.j2").render(page=page)


def device(d: dict) -> str:
    extra = f", CUDA {d['cuda']}, cuDNN {d['cudnn']}" if d.get("cuda") else ""
    return f"{d.get('name')} ({d['type']}), torch {d['torch']}{extra}"


def section(sid: str, title: str, headers: tuple, rows: list, empty: str, notes: list | None = None) -> dict:
    return {"id": sid, "title": title, "notes": (notes or []) + ([] if rows else [empty]),
            "tables": [{"headers": headers, "rows": rows}] if rows else []}


def plots_section(items: list[dict]) -> dict:
    return {"id": "plots", "title": "Plots", "plots": [{**p, "svg": Markup(p["svg"])} for p in items],
            "notes": [] if items else ["Nothing ran, so there is nothing to plot."]}


def num(value) -> dict:
    text = "-" if value is None else count(value) if isinstance(value, float) else str(value)
    return {"text": text, "class": "num"}


def href(path: str | None) -> str | None:
    """A link to a file beside the page, or None: a results.json is data, and a crafted one must not
    link anywhere else (`https:`, `//host`, `javascript:`, an absolute path)."""
    text = str(path) if path else ""
    if not text or ":" in text or "\\" in text or text.startswith("/"):
        return None
    return quote(text)
