"""The frame of the HTML report: its head with the inline styles, and its end with the one
inline script.

The styles use system fonts (nothing to fetch) and follow the reader's light or dark mode
(``prefers-color-scheme``); the charts draw with ``currentColor`` and these classes. The
script only opens or closes every level's details at once, opens the level a link points
to, and, once it has run, marks ``<body data-ready="1">`` (a browser test looks for it:
a script error leaves it unset).
"""

from __future__ import annotations

from html import escape

__all__ = ["CSS", "PAGE_END", "SCRIPT", "page_head"]

CSS = """
:root{--bg:#fff;--fg:#1b1f24;--mut:#5b636e;--line:#d7dbe0;--card:#f6f7f9;--grid:#e9ecef;
--pass:#117733;--fail:#b3261e;--inv:#8a6d00;--unc:#5b636e;--slo:#b3261e;--front:#5b636e;
color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#16191d;--fg:#e6e8eb;--mut:#9aa3ad;
--line:#363c44;--card:#1f2329;--grid:#2a2f36;--pass:#5cc98a;--fail:#ff8a80;--inv:#e0c050;
--unc:#9aa3ad;--slo:#ff8a80;--front:#9aa3ad}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1400px;margin:0 auto;padding:0 20px 40px}
h1{font-size:1.6em;margin:.6em 0 .2em}h2{margin:1.6em 0 .3em;font-size:1.3em}
h3{margin:1.2em 0 .3em;font-size:1.05em}h4{margin:.8em 0 .2em;font-size:.95em}
header.top{border-bottom:1px solid var(--line);padding-bottom:8px}
.sub{color:var(--mut);font-size:.9em;margin:.2em 0}
.verdict{font-size:1.15em;font-weight:600;margin:.3em 0;padding:6px 10px;border-radius:6px;
border-left:6px solid}
.verdict.pass{border-color:var(--pass)}.verdict.fail{border-color:var(--fail)}
.verdict.invalid{border-color:var(--inv)}
.warn{color:var(--inv);font-weight:600}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:.8em;font-weight:600;
border:1px solid;white-space:nowrap}
.badge.pass{color:var(--pass)}.badge.fail{color:var(--fail)}.badge.invalid{color:var(--inv)}
.badge.unchecked{color:var(--unc)}
nav.toc{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:4px 16px;margin:14px 0}nav.toc h2{margin:.4em 0 .2em}
nav.toc ol{margin:.3em 0;padding-left:1.4em}nav.toc li{margin:.15em 0}
a{color:inherit;text-decoration-color:var(--mut)}
section.test{border-top:2px solid var(--line);margin-top:24px}
table{border-collapse:collapse;margin:.4em 0;font-size:.88em}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--card);font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.na{color:var(--mut)}
table.kv th{width:16em}table.engines td:not(:last-child){white-space:nowrap}
.scroll{overflow-x:auto}
tr.regressed td{color:var(--fail);font-weight:600}tr.improved td{color:var(--pass)}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:8px}
.charts figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:6px}
.charts.small{grid-template-columns:repeat(auto-fill,minmax(280px,1fr))}
ul.signals{display:flex;flex-wrap:wrap;gap:2px 20px;list-style:none;padding:0}
.legend{grid-column:1/-1;margin:.2em 0;font-size:.88em}
.key{margin-right:14px;white-space:nowrap}
.key i{display:inline-block;width:14px;height:4px;margin-right:5px;vertical-align:middle}
.key i.dash{border-top:2px dashed var(--fg)}
svg.chart{display:block;width:100%;height:auto;color:var(--fg);font-size:11px;font-family:inherit}
svg.chart text{fill:currentColor}svg.chart .ct{font-size:13px;font-weight:600}
svg.chart .tk{fill:var(--mut)}svg.chart .al{font-size:11.5px}
svg.chart .grid{stroke:var(--grid)}svg.chart .frame{fill:none;stroke:var(--mut)}
svg.chart .ln{fill:none;stroke-width:2}svg.chart .knee{fill:none;stroke-width:2}
svg.chart .slo{stroke:var(--slo);stroke-dasharray:5 4;stroke-width:1.5}
svg.chart .slot{fill:var(--slo);font-size:10.5px;paint-order:stroke;stroke:var(--card);
stroke-width:3px}
svg.chart .front{fill:none;stroke:var(--front);stroke-dasharray:2 3;stroke-width:1.6}
svg.chart .bar{fill:#56B4E9;opacity:.85}svg.chart .seq{fill:none;stroke:#0072B2;stroke-width:1}
svg.chart .gap{stroke:var(--fail);stroke-width:1.5}
details.level{border:1px solid var(--line);border-radius:6px;margin:6px 0;padding:4px 10px}
details.level[open]{background:var(--card)}
details.level summary{cursor:pointer}
ul.why li{color:var(--fail)}ul{margin:.3em 0}
button{font:inherit;font-size:.85em;padding:2px 10px;border:1px solid var(--line);
border-radius:5px;background:var(--card);color:var(--fg);cursor:pointer}
"""

SCRIPT = """
(function(){
  document.querySelectorAll('button[data-toggle]').forEach(function(b){
    b.addEventListener('click', function(){
      var open = b.getAttribute('data-toggle') === 'open';
      document.querySelectorAll(b.getAttribute('data-target') + ' details.level')
        .forEach(function(d){ d.open = open; });
    });
  });
  function reveal(){
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (el && el.tagName === 'DETAILS') { el.open = true; }
  }
  window.addEventListener('hashchange', reveal);
  reveal();
  document.body.setAttribute('data-ready', '1');
})();
"""


def page_head(title: str) -> str:
    """The page up to the start of its content."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>"
    )


#: The page after its content.
PAGE_END = f"</main><script>{SCRIPT}</script></body></html>\n"
