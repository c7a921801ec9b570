"""local_session's settings (tstate.spark.session.session_settings): tstate's defaults,
the caller's conf over them, and the opt-in quick JIT for the driver JVM."""

from __future__ import annotations

from typing import Any

from tstate.spark.session import QUICK_JIT, session_settings

JAVA = "spark.driver.extraJavaOptions"


def test_defaults_and_conf_over_them() -> None:
    s = session_settings(conf={"spark.sql.shuffle.partitions": "7", "spark.executor.memory": "1g"})
    assert s["spark.sql.shuffle.partitions"] == "7" and s["spark.executor.memory"] == "1g"
    assert s["spark.sql.adaptive.enabled"] == "false" and JAVA not in s


def test_quick_jit_adds_the_option_to_the_callers_java_options() -> None:
    assert session_settings(True)[JAVA] == QUICK_JIT == "-XX:TieredStopAtLevel=1"
    assert session_settings(True, {JAVA: " -Xss4m "})[JAVA] == "-Xss4m " + QUICK_JIT
    assert session_settings(False, {JAVA: "-Xss4m"})[JAVA] == "-Xss4m"


def test_the_worker_daemon_on_local_masters_only() -> None:
    from tstate.spark.session import DAEMON, DAEMON_SETTING, is_local

    assert DAEMON == "tstate.spark.daemon"
    for master in ("local", "local[2]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]"):
        assert is_local(master) and session_settings(master=master)[DAEMON_SETTING] == DAEMON
    for master in ("spark://host:7077", "yarn", "k8s://https://h:443", "localhost"):
        assert not is_local(master) and DAEMON_SETTING not in session_settings(master=master)
    assert session_settings(conf={DAEMON_SETTING: "pyspark.daemon"})[DAEMON_SETTING] == "pyspark.daemon"


def test_a_session_warms_its_workers_only_when_it_starts_the_context(spark: Any, monkeypatch: Any) -> None:
    """``local_session`` starts the workers of a SparkContext it started (pretended
    here: the shared session's context stands in for a new one), not of one it found."""
    from pyspark import SparkContext

    from tstate.spark import local_session, warm

    calls: list[int] = []
    monkeypatch.setattr(warm, "start_worker", lambda s: calls.append(1))
    assert local_session("local[2]", warm=True) is spark and calls == []  # (found running)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    assert local_session("local[2]") is spark and calls == []  # (off by default)
    local_session("local[2]", warm=True)
    assert calls == [1]
