"""Drop the widget views from a notebook's stored outputs: python tools/strip_widget_views.py NOTEBOOK...

A stored widget view (``application/vnd.jupyter.widget-view+json``) points at a
widget model that only the kernel which ran the notebook had: JupyterLab shows
"Error displaying widget: model not found" for it in a notebook opened before it
is run.  The lessons' widgets also give a ``text/html`` stand-in (see
``helpers.teaching.widgets``), which is what is kept.  nbval does not compare
widget views, so the stored outputs still check a fresh run.  ``make
refresh-notebooks`` runs this after executing each lesson.
"""

import sys

import nbformat

VIEW = "application/vnd.jupyter.widget-view+json"

for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if VIEW in out.get("data", {}):
                if "text/html" not in out["data"]:
                    sys.exit(f"{path}: a widget output without a text/html stand-in; give its class one")
                del out["data"][VIEW]
                changed = True
    if changed:
        nbformat.write(nb, path)
