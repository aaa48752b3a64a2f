from trainready.env import relevant_env_vars, snapshot


def test_snapshot_records_versions_and_device(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/x")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("UNRELATED_VAR", "1")
    snap = snapshot("cpu")
    assert snap["torch"] and snap["python"] and snap["packages"]["torch"]
    assert snap["device"]["type"] == "cpu"
    assert snap["env_vars"]["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/x"
    assert "UNRELATED_VAR" not in snap["env_vars"]


def test_credentials_are_never_recorded(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("NEURON_API_KEY", "k")
    env = relevant_env_vars()
    assert env["HF_TOKEN"] == "(redacted)" and env["NEURON_API_KEY"] == "(redacted)"
    assert "hf_secret_value" not in str(env)
