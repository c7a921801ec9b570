"""local_session's settings (tstate.spark.session.session_settings): tstate's defaults,
the caller's conf over them, and the opt-in quick JIT for the driver JVM."""

from __future__ import annotations

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
