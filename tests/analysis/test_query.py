"""hpstudy.analysis.query: a filter parsed and evaluated over a frame's columns, never run as code (pandas'
DataFrame.query is only the reference for what an allowed filter selects); and `python -m hpstudy.analysis
query` on it: exit 2 and one `error:` line for a bad filter, --columns, store or study."""

import os

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.query import MAX_DEPTH, MAX_LENGTH, QueryError, filter_rows
from hpstudy.cli import hpstudy_main
from hpstudy.study.store.layout import write_trial
from hpstudy.trainers.errors import HpstudyError
from tests.helpers import stored_row

TRIALS = pd.DataFrame(
    {
        "model": ["vit_c_tiny", "vit_c_tiny", "cnn_tiny", None, "cnn_tiny"],
        "status": ["ok", "diverged", "ok", "failed", "ok"],
        "epochs": [1, 2, 3, 4, 2],
        "lr": [0.001, 0.01, np.nan, 0.1, 0.01],
        "top1_err": [4.5, 90.0, 12.0, np.nan, 3.0],
        "ema": [True, False, True, False, False],
    }
)

SAME_AS_PANDAS = [
    "lr == 0.01",
    "lr != 0.01",
    "lr < 0.01",
    "lr <= 0.01",
    "lr > 0.01",
    "lr >= 0.01",
    "0.001 < lr < 0.1",
    "0.001 <= lr < 0.1 < top1_err",
    "top1_err > lr",
    "model == 'vit_c_tiny'",
    'model != "cnn_tiny"',
    "model < 'd'",
    "model == None",
    "status in ['ok', 'diverged']",
    "status not in ('ok',)",
    "epochs in [1, 4]",
    "epochs in [2 * 2, -1 + 2]",
    "model == 'vit_c_tiny' and top1_err < 5",
    "model == 'cnn_tiny' or top1_err < 5",
    "not top1_err < 5",
    "ema",
    "not ema",
    "~ema",
    "ema and lr >= 0.001",
    "ema & (lr > 0.001)",
    "(ema) | (status == 'failed')",
    "lr > 0.001 & top1_err < 50",
    "status == 'failed' | lr < 0.01 & ema",
    "model != 'a & b' & ema",
    "top1_err - 1 > 2 * epochs",
    "top1_err / epochs > 5",
    "epochs // 2 == 1",
    "epochs % 2 == 0",
    "epochs ** 2 >= 9",
    "-lr < -0.005",
    "+epochs == 2",
    "lr * 100 == epochs / 2",
    "top1_err / 0 > 1",
    "((((lr)))) > 0.005",
    "2 ** 3 == epochs * 4",
    "ema == True",
    "ema != False and True",
]


@pytest.mark.parametrize("expr", SAME_AS_PANDAS)
def test_an_allowed_filter_selects_the_rows_dataframe_query_selects(expr):
    assert filter_rows(TRIALS, expr).equals(TRIALS.query(expr))


def test_the_filter_never_hands_the_expression_to_pandas_or_to_eval(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("called")

    for target in ("pandas.DataFrame.query", "pandas.DataFrame.eval", "pandas.eval", "builtins.eval", "builtins.exec"):
        monkeypatch.setattr(target, refuse)
    assert list(filter_rows(TRIALS, "model == 'vit_c_tiny' and 1 < epochs * 2 < 5").index) == [0, 1]


def test_a_constant_condition_is_the_same_for_every_row():
    assert filter_rows(TRIALS, "1 < 2").equals(TRIALS) and filter_rows(TRIALS, "False").empty


ATTACKS = [
    ("@pd.io.common.os.system('touch M') == 0", "not an expression"),
    ("lr.to_csv('M2') == 0", "calls are not allowed: \"lr.to_csv('M2')\""),
    ("__import__('os').system('touch M') == 0", "calls are not allowed"),
    ("open('M', 'w') and ema", "calls are not allowed"),
    ("().__class__.__base__.__subclasses__() == 1", "calls are not allowed"),
    ("lr.__class__ == 1", "attribute access is not allowed: 'lr.__class__'"),
    ("lr.values > 1", "attribute access is not allowed"),
    ("lr[0] > 1", "subscripts are not allowed: 'lr[0]'"),
    ("(lambda: 1) == 1", "lambdas are not allowed"),
    ("[__import__('os').system('touch M') for x in [1]] == [0]", "comprehensions are not allowed"),
    ("any(__import__('os').system('touch M') for x in [1])", "calls are not allowed"),
    ("f\"{__import__('os').system('touch M')}\" == '0'", "f-strings are not allowed"),
    ("(M := 1) == 1", "assignments (:=) are not allowed"),
    ("lr if ema else lr", "conditional expressions are not allowed"),
    ("{'a': 1} == lr", "Dict expressions are not allowed"),
    ("lr @ lr > 1", "operators other than + - * / // % ** are not allowed"),
    ("epochs << 2 > 1", "operators other than"),
    ("lr is None", "is / is not are not allowed"),
    ("b'M' == model", "literals are numbers, strings, True, False or None"),
    ("model * 1000000000 == 'a'", "arithmetic takes numbers and numeric columns only"),
    ("'M' * 10 ** 9 == model", "arithmetic takes numbers and numeric columns only"),
    ("9 ** 9 ** 9 ** 9 > lr", "cannot evaluate"),
    ("lr == [1, 2]", "a list is allowed only after in / not in"),
    ("lr in lr", "in / not in take a list or tuple of literals"),
    ("status in [status]", "in / not in take a list or tuple of literals, not columns"),
    ("model < 1", "cannot evaluate: 'model < 1'"),
    ("__builtins__ == 1", "unknown column: '__builtins__'"),
    ("[*lr & wd]", "not an expression"),  # valid Python until & is read with DataFrame.query's precedence
    ("{**lr & wd}", "not an expression"),
]


@pytest.mark.parametrize("expr,message", ATTACKS)
def test_anything_else_is_refused_in_one_line_and_nothing_runs(expr, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueryError) as refused:
        filter_rows(TRIALS, expr)
    text = str(refused.value)
    assert text.startswith(f"query {expr!r}: ") and message in text and "\n" not in text, text
    assert os.listdir(tmp_path) == []


def test_a_refusal_says_what_is_allowed():
    with pytest.raises(QueryError, match=r"allowed: column names, numbers, strings, .* \+ - \* / // % \*\*$"):
        filter_rows(TRIALS, "lr.sum() > 1")


def test_a_name_that_is_no_column_is_named_and_the_columns_listed():
    with pytest.raises(QueryError, match=r"unknown column: 'top1'; columns: model, status, epochs, lr, top1_err, ema$"):
        filter_rows(TRIALS, "top1 < 5")


@pytest.mark.parametrize("expr", ["lr + 1", "lr", "model", "epochs", "1", "'ok'", "None", "ema and lr"])
def test_a_filter_that_is_no_condition_is_refused(expr):
    with pytest.raises(QueryError, match="not a condition"):
        filter_rows(TRIALS, expr)


@pytest.mark.parametrize(
    "expr,message",
    [
        ("-" * (MAX_DEPTH + 1) + "lr > 0", f"nested more than {MAX_DEPTH} levels deep"),
        ("not " * MAX_DEPTH + "ema", "nested more than"),
        ("lr" + " + lr" * MAX_DEPTH + " > 0", "nested more than"),
        ("epochs in " + "[" * 60 + "]" * 60, "nested more than"),
        ("(" * 300 + "lr" + ")" * 300, "not an expression (too many nested parentheses)"),
        ("lr > 0 and " * 100 + "ema", f"at most {MAX_LENGTH} allowed"),
        ("x" * 10**6, f"{10**6} characters; at most {MAX_LENGTH} allowed"),
    ],
)
def test_a_deep_or_huge_expression_is_refused_in_one_short_line(expr, message):
    with pytest.raises(QueryError) as refused:
        filter_rows(TRIALS, expr)
    text = str(refused.value)
    assert message in text and "\n" not in text and len(text) < 1000, text


@pytest.mark.parametrize(
    "expr,message",
    [
        ("\udcff", "query '\\udcff': not UTF-8 text (character 1, '\\udcff', stands for a byte that is not UTF-8)"),
        ("model == 'a\udcff'", "query \"model == 'a\\udcff'\": not UTF-8 text (character 12,"),
        ("lr\x00 > 1", "query 'lr\\x00 > 1': not an expression (source code string cannot contain null bytes)"),
        ("lr >\n 1 and\n", "query 'lr >\\n 1 and\\n': not an expression (invalid syntax)"),
    ],
)
def test_text_that_is_not_utf8_or_not_one_line_is_refused_in_one_printable_line(expr, message):
    """A command line's byte that is not UTF-8 arrives as a lone surrogate, which ast.parse cannot
    encode (a UnicodeEncodeError traceback before): a QueryError whose message any stream can print."""
    with pytest.raises(QueryError) as refused:
        filter_rows(TRIALS, expr)
    text = str(refused.value)
    assert text.startswith(message) and text.isprintable(), text


@pytest.mark.parametrize("raised", [SyntaxError, ValueError])
def test_a_null_byte_is_one_line_whichever_error_pythons_parser_raises(raised, monkeypatch):
    """Python 3.11.2's ast.parse raises ValueError for a null byte, later 3.11 releases SyntaxError: the same line."""
    from types import SimpleNamespace

    from hpstudy.analysis import query

    def parse(*args, **kwargs):
        raise raised("source code string cannot contain null bytes")

    monkeypatch.setattr(query, "ast", SimpleNamespace(parse=parse))  # the query's parser only, not pytest's
    expected = r"^query 'lr\\x00 > 1': not an expression \(source code string cannot contain null bytes\)"
    with pytest.raises(QueryError, match=expected):
        filter_rows(TRIALS, "lr\x00 > 1")


@pytest.mark.parametrize("expr", [None, b"lr > 1", 5, ["lr > 1"]])
def test_a_filter_that_is_not_text_is_refused(expr):
    with pytest.raises(QueryError, match=r"^query: bad value .*; allowed: a filter expression \(text\)$"):
        filter_rows(TRIALS, expr)


def test_columns_of_one_name_or_with_line_breaks_in_their_names_are_named_in_one_line():
    twice = pd.DataFrame([[1.0, 2.0, 3.0]], columns=["lr", "lr", "a\nb"])
    with pytest.raises(QueryError, match=r"^query 'lr > 1': the table has 2 columns of this name: 'lr'"):
        filter_rows(twice, "lr > 1")
    with pytest.raises(QueryError, match=r"unknown column: 'wd'; columns: lr, lr, a\\nb$"):
        filter_rows(twice, "wd > 1")


def test_a_query_error_is_a_users_mistake():
    assert issubclass(QueryError, HpstudyError)


@pytest.fixture
def store(tmp_path):
    root = str(tmp_path / "store")
    for key, model, err in [("a", "vit_c_tiny", 4.0), ("b", "vit_c_tiny", 9.0), ("c", "cnn_tiny", 3.0)]:
        write_trial(
            root,
            "s",
            stored_row(
                trial_key=key, model=model, optimizer="adamw", epochs=2, lr=1e-3, wd=0.05, status="ok", top1_err=err
            ),
        )
    write_trial(
        root,
        "t",
        stored_row(
            trial_key="d",
            model="vit_c_tiny",
            optimizer="sgd",
            epochs=2,
            lr=0.1,
            wd=0.0,
            status="diverged",
            top1_err=99.0,
        ),
    )
    return root


def test_cli_prints_the_matching_rows(store, capsys):
    argv = ["query", "--store", store, "--study", "s", "--columns", "trial_key,top1_err"]
    assert hpstudy_main(argv + ["model == 'vit_c_tiny' and top1_err < 5"]) == 0
    assert capsys.readouterr().out.split() == ["trial_key", "top1_err", "a", "4.0"]
    assert hpstudy_main(["query", "--store", store, "status in ['ok', 'diverged'] & lr > 1e-2"]) == 0
    assert "diverged" in capsys.readouterr().out


def test_cli_says_when_no_row_matches(store, capsys):
    assert hpstudy_main(["query", "--store", store, "--study", "s", "top1_err < 1"]) == 0
    assert capsys.readouterr().out == "no rows match 'top1_err < 1' (of 3 trials)\n"


def _error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and captured.err.startswith("error: "), captured
    assert len(captured.err.splitlines()) == 1, captured.err
    return captured.err


@pytest.mark.parametrize("expr", ["@pd.io.common.os.system('touch M') == 0", "lr.to_csv('M2') == 0"])
def test_cli_refuses_a_bad_filter_with_exit_2_and_runs_nothing(expr, store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert hpstudy_main(["query", "--store", store, expr]) == 2
    assert _error_line(capsys).startswith(f"error: query {expr!r}: ")
    assert sorted(os.listdir(tmp_path)) == ["store"]


def test_cli_names_an_unknown_column_and_lists_the_columns(store, capsys):
    assert hpstudy_main(["query", "--store", store, "--columns", "model,nope", "top1_err < 5"]) == 2
    err = _error_line(capsys)
    assert "--columns: unknown column 'nope'; columns: " in err and "top1_err" in err


@pytest.mark.parametrize("make", [lambda path: None, lambda path: path.mkdir()])
def test_cli_refuses_a_store_that_does_not_exist(make, tmp_path, capsys):
    make(tmp_path / "nowhere")
    assert hpstudy_main(["query", "--store", str(tmp_path / "nowhere"), "top1_err < 5"]) == 2
    assert f"error: --store: no hpstudy store at '{tmp_path / 'nowhere'}'" in _error_line(capsys)


def test_cli_refuses_a_study_with_no_rows_and_lists_the_stored_ones(store, capsys):
    assert hpstudy_main(["query", "--store", store, "--study", "nope", "top1_err < 5"]) == 2
    err = _error_line(capsys)
    assert "--study: no trials of study 'nope'" in err and "studies stored: ['s', 't']" in err


def test_cli_help_describes_the_filter_language(capsys):
    with pytest.raises(SystemExit):
        hpstudy_main(["query", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "never run as code" in text and "in / not in [literals]" in text and "DataFrame.query" not in text


@pytest.mark.parametrize("frame", [None, [1, 2], {"lr": [1]}, np.zeros(3), pd.Series([1.0]), "trials.parquet"])
def test_a_frame_that_is_no_dataframe_is_refused_naming_its_type(frame):
    with pytest.raises(QueryError) as refused:
        filter_rows(frame, "lr > 0")
    assert str(refused.value) == (f"query: frame: bad value {type(frame).__name__!r}; allowed: a pandas DataFrame"), (
        str(refused.value)
    )
