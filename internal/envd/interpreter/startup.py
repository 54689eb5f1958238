# Moat code-interpreter kernel setup: registers the e2b/chart (matplotlib
# Figure) and e2b/data (pandas DataFrame) display formatters. Run silently
# once per Python kernel start; matplotlib and pandas are never imported here.
def _moat_setup():
    import math
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return

    def num(v):
        try:
            f = float(v)
        except Exception:
            return str(v)
        return f if math.isfinite(f) else None

    def unit(label):
        import re
        m = re.search(r"[\(\[]([^\)\]]+)[\)\]]\s*$", label or "")
        return m.group(1) if m else None

    def scale(axis):
        import matplotlib.dates as mdates
        from matplotlib.category import UnitData
        if isinstance(axis.get_major_formatter(), (mdates.AutoDateFormatter, mdates.DateFormatter, mdates.ConciseDateFormatter)):
            return "datetime"
        if isinstance(getattr(axis, "units", None), UnitData):
            return "categorical"
        return axis.get_scale()

    def coord(v, sc):
        if sc == "datetime":
            import matplotlib.dates as mdates
            try:
                return mdates.num2date(v).isoformat()
            except Exception:
                return num(v)
        return num(v)

    def label_of(artist):
        lbl = artist.get_label() or ""
        return "" if lbl.startswith("_") else lbl

    def axes_chart(ax):
        from matplotlib.patches import Wedge
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        out = {"title": ax.get_title() or None}
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            out.update(type="pie", elements=[
                {"label": w.get_label(), "angle": num(abs(w.theta2 - w.theta1)), "radius": num(w.r)} for w in wedges])
            return out
        xs, ys = scale(ax.xaxis), scale(ax.yaxis)
        out.update(x_label=ax.get_xlabel() or None, y_label=ax.get_ylabel() or None,
                   x_unit=unit(ax.get_xlabel()), y_unit=unit(ax.get_ylabel()))
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            ticks = {round(float(t), 6): l.get_text() for t, l in zip(ax.get_xticks(), ax.get_xticklabels())}
            els = []
            for c in bars:
                for r in c.patches:
                    x = r.get_x() + r.get_width() / 2
                    els.append({"label": ticks.get(round(float(x), 6)) or str(num(x)),
                                "value": num(r.get_height()), "group": label_of(c)})
            out.update(type="bar", elements=els)
            return out
        lines = ax.get_lines()
        scat = [c for c in ax.collections if isinstance(c, PathCollection)]
        if lines:
            out.update(type="line", elements=[
                {"label": label_of(l), "points": [[coord(x, xs), coord(y, ys)] for x, y in zip(l.get_xdata(), l.get_ydata())]}
                for l in lines])
        elif scat:
            out.update(type="scatter", elements=[
                {"label": label_of(c), "points": [[coord(x, xs), coord(y, ys)] for x, y in c.get_offsets()]}
                for c in scat])
        else:
            out.update(type="unknown", elements=[])
            return out
        out.update(x_scale=xs, y_scale=ys,
                   x_ticks=[coord(t, xs) for t in ax.get_xticks()], x_tick_labels=[t.get_text() for t in ax.get_xticklabels()],
                   y_ticks=[coord(t, ys) for t in ax.get_yticks()], y_tick_labels=[t.get_text() for t in ax.get_yticklabels()])
        return out

    def figure_chart(fig):
        axes = [ax for ax in fig.get_axes() if ax.has_data()]
        if not axes:
            return {}
        if len(axes) == 1:
            return axes_chart(axes[0])
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else None
        return {"type": "superchart", "title": title, "elements": [axes_chart(ax) for ax in axes]}

    def frame_data(df):
        import json
        return {str(c): json.loads(df[c].to_json(orient="values", date_format="iso")) for c in df.columns}

    def formatter(mime, module, name, fn):
        # Match by type name so matplotlib/pandas are never imported here;
        # deferred printers are not used because traitlets config reloads
        # inside the kernel reset them.
        class Formatter(BaseFormatter):
            format_type = Unicode(mime)
            print_method = ObjectName("_repr_moat_unused_")
            _return_type = (dict,)

            def __call__(self, obj):
                if not any(c.__module__ == module and c.__name__ == name for c in type(obj).__mro__):
                    return None
                try:
                    return fn(obj)
                except Exception:
                    return None

        return Formatter(parent=ip.display_formatter)

    fmts = ip.display_formatter.formatters
    fmts["e2b/chart"] = formatter("e2b/chart", "matplotlib.figure", "Figure", figure_chart)
    fmts["e2b/data"] = formatter("e2b/data", "pandas.core.frame", "DataFrame", frame_data)

_moat_setup()
del _moat_setup
