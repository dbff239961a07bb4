"""The code interpreter (issue 12.2) through the real e2b_code_interpreter Python SDK against the
whole local system: Sandbox.create() gets the SDK's default template (code-interpreter-v1, which
scripts/system-for-tests.ts registers once .ci/run has built its root filesystem), and run_code
reaches port 49999, served by the agent-runtime driving a Jupyter kernel inside the sandbox; JavaScript
and bash cells, and a kernel's state kept over a pause and resume."""
import base64
import json

import pytest
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="module")
def sbx(system):
    s = Sandbox.create()
    try:
        yield s
    finally:
        s.kill()


def test_state_is_kept_between_cells(sbx):
    assert sbx.run_code("x = 1").error is None
    ex = sbx.run_code("x + 1")
    assert ex.text == "2"
    assert ex.results[0].is_main_result


def test_stdout_and_stderr_stream_to_callbacks(sbx):
    out, err = [], []
    ex = sbx.run_code(
        "import sys\nprint('one')\nprint('two', file=sys.stderr)",
        on_stdout=lambda m: out.append(m.line),
        on_stderr=lambda m: err.append(m.line),
    )
    assert "".join(out) == "one\n"
    assert "".join(err) == "two\n"
    assert ex.logs.stdout == ["one\n"]


def test_error_has_name_value_traceback(sbx):
    ex = sbx.run_code("1 / 0")
    assert ex.error.name == "ZeroDivisionError"
    assert ex.error.value == "division by zero"
    # IPython's traceback, colours and all, as E2B's server sends it.
    assert "Traceback (most recent call last)" in ex.error.traceback
    assert "division by zero" in ex.error.traceback


def test_matplotlib_figure_is_a_png(sbx):
    ex = sbx.run_code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()")
    pngs = [r.png for r in ex.results if r.png]
    assert pngs and base64.b64decode(pngs[0])[1:4] == b"PNG"


def test_contexts_have_their_own_state_and_cwd(sbx):
    ctx = sbx.create_code_context(cwd="/home/user")
    assert ctx.cwd == "/home/user" and ctx.language == "python"
    sbx.run_code("z = 'ctx'", context=ctx)
    assert sbx.run_code("z", context=ctx).text == "'ctx'"
    assert sbx.run_code("z").error.name == "NameError"
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "'/home/user'"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]


def test_env_vars_per_execution(sbx):
    assert sbx.run_code("import os; os.environ['ONLY_HERE']", envs={"ONLY_HERE": "yes"}).text == "'yes'"
    assert sbx.run_code("import os; 'ONLY_HERE' in os.environ").text == "False"


def test_timeout_interrupts_and_context_stays_usable(sbx):
    with pytest.raises(Exception):
        sbx.run_code("import time\nwhile True: time.sleep(0.1)", timeout=2)
    assert sbx.run_code("x * 10").text == "10"


def test_a_kernel_that_exits_mid_cell_is_e2bs_context_restarting_and_the_next_cell_runs(sbx):
    ctx = sbx.create_code_context()
    assert sbx.run_code("kept = 41", context=ctx).error is None
    dead = sbx.run_code("import os\nos._exit(1)", context=ctx)
    assert (dead.error.name, dead.error.value) == ("ContextRestarting", "Context was restarted")
    assert sbx.run_code("kept", context=ctx).error.name == "NameError"
    assert sbx.run_code("kept = 1; kept + 1", context=ctx).text == "2"


def test_unknown_language_is_a_400_saying_why(sbx):
    with pytest.raises(Exception, match="no kernel for language 'cobol'"):
        sbx.run_code("1", language="cobol")


def test_r_cells(sbx):
    ex = sbx.run_code("1+1", language="r")  # IRkernel's value is a display: a result, not the main one
    assert ex.error is None and ex.results[0].text == "[1] 2"
    err = sbx.run_code("stop('boom')", language="r")
    assert err.error is not None and err.error.name == "ERROR" and "boom" in err.error.value


def test_r_cell_env_values_are_data(sbx):
    marker = "/tmp/r-env-injected-py"
    envs = {
        # What an R driver that pasted values into R source would run.
        "R_QUOTE": f"x'); file.create('{marker}'); ('",
        "R_DQUOTE": f'x"); file.create("{marker}"); ("',
        "R_NEWLINE": f"a\nfile.create('{marker}')\nb",
        "SHELL_SUBST": f"$(touch {marker}) `touch {marker}`",
        "R_PROFILE_USER": "/nonexistent/.Rprofile",
        "LD_PRELOAD": "/nonexistent/payload.so",
    }
    names = ", ".join(json.dumps(k) for k in envs)
    ex = sbx.run_code(f"cat(jsonlite::toJSON(as.list(Sys.getenv(c({names}))), auto_unbox = TRUE))", language="r", envs=envs)
    assert ex.error is None, ex.error
    assert json.loads("".join(ex.logs.stdout)) == envs
    assert sbx.run_code(f"file.exists('{marker}')", language="r").results[0].text == "[1] FALSE"
    assert sbx.run_code("Sys.getenv('R_QUOTE', unset = 'gone')", language="r").results[0].text == '[1] "gone"'


def test_matplotlib_figures_carry_e2b_charts(sbx):
    ex = sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.bar(['Author A', 'Author B'], [100, 200], label='Books Sold')\n"
        "plt.title('Book Sales')\nplt.xlabel('Authors')\nplt.show()"
    )
    charts = [r.chart for r in ex.results if r.chart]
    assert charts, ex.results
    bar = charts[0]
    assert bar.type == "bar" and bar.title == "Book Sales" and bar.x_label == "Authors"
    assert [(e.label, e.group, e.value) for e in bar.elements] == [("Author A", "Books Sold", 100), ("Author B", "Books Sold", 200)]
    line = [r.chart for r in sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4], label='l')\nplt.show()").results if r.chart][0]
    assert line.type == "line" and [(e.label, e.points) for e in line.elements] == [("l", [(1, 3), (2, 4)])]
    pie = [r.chart for r in sbx.run_code("import matplotlib.pyplot as plt\nplt.pie([90, 10], labels=['a', 'b'])\nplt.show()").results if r.chart][0]
    assert pie.type == "pie" and [(e.label, e.angle) for e in pie.elements] == [("a", 324), ("b", 36)]
    scatter = [r.chart for r in sbx.run_code("import matplotlib.pyplot as plt\nplt.scatter([1], [2], label='s')\nplt.show()").results if r.chart][0]
    assert scatter.type == "scatter" and scatter.elements[0].points == [(1, 2)]


def test_typescript_cells(sbx):
    ex = sbx.run_code("function subtract(x: number, y: number): number { return x - y }\nsubtract(1, 2)", language="ts")
    assert ex.error is None and ex.text == "-1"


def test_javascript_and_bash_cells(sbx):
    assert sbx.run_code("const base = 40;\nfunction inc(n) { return n + 1 }", language="js").error is None
    ex = sbx.run_code("inc(base) + 1", language="javascript")
    assert ex.error is None and ex.text == "42"
    assert sbx.run_code("cd /tmp; X=5", language="bash").error is None
    out = []
    ex = sbx.run_code("pwd; echo $X", language="bash", on_stdout=lambda m: out.append(m.line))
    assert ex.error is None and "".join(out) == "/tmp\n5\n"
    assert sbx.run_code("ls /nonexistent-dir", language="bash").error.value == "exit status 2"


def test_state_survives_a_pause_and_resume(system):
    s = Sandbox.create()
    try:
        assert s.run_code("kept = 'across pause'").error is None
        assert s.pause()
        back = Sandbox.connect(s.sandbox_id)
        assert back.run_code("kept").text == "'across pause'"
    finally:
        s.kill()
