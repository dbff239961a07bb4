// Python run (silently) in every IPython kernel the Python driver starts, after each start and
// restart: it adds E2B's two extra display formats, so a displayed matplotlib figure carries an
// `e2b/chart` bundle entry (the driver turns it into the result's `chart`) and a pandas DataFrame
// an `e2b/data` one (the result's `data`). Kept as a string so the runtime's bundle carries it.
//
// The chart shapes are E2B's (its SDKs' `Chart` types): line and scatter charts with ticks,
// tick labels, scales and points per element; bar charts with label/group/value; pie charts with
// label/angle/radius; box-and-whisker with the five numbers and outliers; several axes are a
// `superchart`. The extraction reads the figure's artists; it never fails a cell (no chart then).
// Nothing here imports matplotlib or pandas: a cell that never did pays nothing.
export const KERNEL_FORMATTERS_PY = String.raw`
def _e2b_install_formatters():
    import math, re, sys, datetime
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import Unicode, ObjectName

    def clean(v):
        """A JSON-safe scalar: numpy numbers as Python ones, dates as ISO text, NaN/inf as None."""
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):
            try:
                v = v.item()
            except Exception:
                pass
        if isinstance(v, (datetime.datetime, datetime.date)):
            return v.isoformat()
        if type(v).__name__ == "datetime64":
            return str(v.astype("datetime64[s]"))
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (int, float, str)) or v is None:
            return v
        return str(v)

    def rounded(v):
        v = clean(v)
        return round(v, 9) if isinstance(v, float) else v

    def converter_of(axis):
        get = getattr(axis, "get_converter", None)
        return get() if callable(get) else getattr(axis, "converter", None)

    def is_date(conv):
        return conv is not None and type(conv).__module__ == "matplotlib.dates"

    def ticks_of(axis, ticks):
        if is_date(converter_of(axis)):
            from matplotlib.dates import num2date
            return [num2date(t).isoformat() for t in ticks]
        return [clean(float(t)) for t in ticks]

    def scale_of(axis, scale, ticks, labels):
        if is_date(converter_of(axis)):
            return "datetime"
        if scale != "linear":
            return scale
        # Integer ticks 0..n-1 whose labels are not those numbers: a categorical axis.
        if labels and all(isinstance(t, float) and t == i and str(i) != l for i, (t, l) in enumerate(zip(ticks, labels))):
            return "categorical"
        return "linear"

    def unit_of(label):
        m = re.search(r"\s\((.*?)\)|\[(.*?)\]", label or "")
        return (m.group(1) or m.group(2)) if m else None

    def base(ax, kind):
        return {"type": kind, "title": ax.get_title() or None, "elements": []}

    def planar(ax, kind, swap=False):
        c = base(ax, kind)
        xl, yl = ax.get_xlabel() or None, ax.get_ylabel() or None
        if swap:
            xl, yl = yl, xl
        c.update(x_label=xl, y_label=yl, x_unit=unit_of(xl), y_unit=unit_of(yl))
        return c

    def with_ticks(ax, c):
        for name, axis, ticks, labels, scale in (
            ("x", ax.xaxis, ax.get_xticks(), ax.get_xticklabels(), ax.get_xscale()),
            ("y", ax.yaxis, ax.get_yticks(), ax.get_yticklabels(), ax.get_yscale()),
        ):
            t = ticks_of(axis, ticks)
            l = [x.get_text() for x in labels]
            c[name + "_ticks"], c[name + "_tick_labels"], c[name + "_scale"] = t, l, scale_of(axis, scale, t, l)
        return c

    def is_rule(line):
        # axhline/axvline and hand-drawn grid rules: two points on one vertical or horizontal.
        x, y = list(line.get_xdata()), list(line.get_ydata())
        return len(x) == 2 and len(y) == 2 and (x[0] == x[1] or y[0] == y[1]) and line.get_linestyle() in ("--", ":", "-.")

    def points_of(xs, ys):
        return [[clean(x), clean(y)] for x, y in zip(xs, ys)]

    def line_chart(ax):
        c = with_ticks(ax, planar(ax, "line"))
        for line in ax.get_lines():
            if is_rule(line):
                continue
            label = line.get_label()
            if label.startswith("_child"):
                label = "Line " + label[6:]
            c["elements"].append({"label": label, "points": points_of(line.get_xdata(), line.get_ydata())})
        return c

    def scatter_chart(ax):
        c = with_ticks(ax, planar(ax, "scatter"))
        for coll in ax.collections:
            offsets = coll.get_offsets()
            mask = getattr(offsets, "mask", None)
            rows = [i for i in range(len(offsets)) if mask is None or not bool(mask[i].any())]  # NaN points are masked
            c["elements"].append({"label": coll.get_label(), "points": [[clean(offsets[i][0]), clean(offsets[i][1])] for i in rows]})
        return c

    def bar_chart(ax):
        containers = [k for k in ax.containers if type(k).__name__ == "BarContainer"]
        horizontal = bool(containers) and getattr(containers[0], "orientation", None) == "horizontal"
        c = planar(ax, "bar", swap=horizontal)
        axis_labels = ax.get_yticklabels() if horizontal else ax.get_xticklabels()
        by_pos = {round(float(t.get_position()[1 if horizontal else 0]), 6): t.get_text() for t in axis_labels}
        for k in containers:
            group = k.get_label()
            if group.startswith("_container"):
                group = "Group " + group[10:]
            for rect in k:
                if horizontal:
                    at, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
                else:
                    at, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
                label = by_pos.get(round(float(at), 6)) or str(rounded(at))
                c["elements"].append({"label": label, "group": group, "value": rounded(value)})
        return c

    def pie_chart(ax):
        c = base(ax, "pie")
        for w in ax.patches:
            # The wedges' angles carry float32 noise (323.99999 for 90%): whole hundredths of a degree.
            c["elements"].append({"label": w.get_label(), "angle": round(abs(float(w.theta2) - float(w.theta1)), 2), "radius": rounded(w.r)})
        return c

    def box_chart(ax):
        # boxplot(patch_artist=True): one PathPatch per box; per box a whisker on each side (two
        # points on one position line), caps, a median as wide as the box, fliers (markers only).
        # boxplot labels the position axis with fixed tick labels: that tells the orientation.
        horizontal = type(ax.yaxis.get_major_formatter()).__name__ == "FixedFormatter"
        c = planar(ax, "box_and_whisker", swap=horizontal)
        names = [t.get_text() for t in (ax.get_yticklabels() if horizontal else ax.get_xticklabels())]
        eps = 1e-9
        for i, p in enumerate(ax.patches):
            v = p.get_path().vertices
            at, val = (v[:, 1], v[:, 0]) if horizontal else (v[:, 0], v[:, 1])
            a0, a1, q1, q3 = float(at.min()), float(at.max()), float(val.min()), float(val.max())
            e = {"label": names[i] if i < len(names) else str(i + 1), "min": rounded(q1), "first_quartile": rounded(q1),
                 "median": rounded((q1 + q3) / 2), "third_quartile": rounded(q3), "max": rounded(q3), "outliers": []}
            for line in ax.get_lines():
                xs, ys = [float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()]
                pos, vals = (ys, xs) if horizontal else (xs, ys)
                if not pos or not all(a0 - eps <= x <= a1 + eps for x in pos):
                    continue
                if line.get_linestyle() in ("None", "", " "):
                    e["outliers"].extend(rounded(y) for y in vals)
                elif len(set(pos)) == 1 and len(vals) == 2:
                    lo, hi = min(vals), max(vals)
                    if hi <= q1 + eps:
                        e["min"] = rounded(lo)
                    elif lo >= q3 - eps:
                        e["max"] = rounded(hi)
                elif len(set(vals)) == 1 and q1 - eps <= vals[0] <= q3 + eps and abs((max(pos) - min(pos)) - (a1 - a0)) < 1e-6:
                    e["median"] = rounded(vals[0])
            c["elements"].append(e)
        return c

    def kind_of(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.lines import Line2D
        from matplotlib.patches import PathPatch, Rectangle, Wedge
        from matplotlib.text import Text
        artists = [a for a in getattr(ax, "_children", list(ax.get_children())) if not isinstance(a, Text)]
        if all(isinstance(a, Line2D) for a in artists):
            return "line"
        if all(isinstance(a, (PathPatch, Line2D)) for a in artists):
            return "box_and_whisker"
        artists = [a for a in artists if not (isinstance(a, Line2D) and is_rule(a))]
        for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
            if all(isinstance(a, cls) for a in artists):
                return kind
        return "unknown"

    def chart_of_ax(ax):
        kind = kind_of(ax)
        make = {"line": line_chart, "scatter": scatter_chart, "bar": bar_chart, "pie": pie_chart, "box_and_whisker": box_chart}.get(kind)
        return make(ax) if make else base(ax, "unknown")

    def chart_of(fig):
        axes = fig.get_axes()
        if not axes:
            return None
        if len(axes) > 1:
            sup = getattr(fig, "_suptitle", None)
            return {"type": "superchart", "title": sup.get_text() if sup is not None else "", "elements": [chart_of_ax(a) for a in axes]}
        return chart_of_ax(axes[0])

    def formatter(mime, module, type_name, extract):
        """A display formatter for one type, never imported here: no instance exists unless the
        cell imported its module."""
        class Formatter(BaseFormatter):
            format_type = Unicode(mime)
            print_method = ObjectName("_repr_" + mime.replace("/", "_") + "_")
            _return_type = (dict,)

            def __call__(self, obj):
                mod = sys.modules.get(module)
                if mod is None or not isinstance(obj, getattr(mod, type_name)):
                    return None
                try:
                    return extract(obj)
                except Exception:
                    return None
        return Formatter

    def data_of(df):
        return {str(k): [clean(v) for v in col] for k, col in df.to_dict(orient="list").items()}

    shell = get_ipython()
    if shell is not None:
        f = shell.display_formatter
        f.formatters["e2b/chart"] = formatter("e2b/chart", "matplotlib.figure", "Figure", chart_of)(parent=f)
        f.formatters["e2b/data"] = formatter("e2b/data", "pandas", "DataFrame", data_of)(parent=f)


_e2b_install_formatters()
del _e2b_install_formatters
`;
