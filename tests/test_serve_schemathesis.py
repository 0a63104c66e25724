"""schemathesis (an OpenAPI fuzzer) against the live service's /openapi.json: a bounded number of generated requests,
valid and invalid, per operation; no 5xx, and every response conforms to the schema it is documented with."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is part of the test extra")

from schemathesis.generation import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import negative_data_rejection  # noqa: E402
from test_serve import Server, _free_port  # noqa: E402

from npuport.serve.app import ServeConfig  # noqa: E402


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_openapi_fuzz_no_5xx_and_conforming(artifacts, mode):
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_items=8, max_chars=2000)) as s:
        schema = schemathesis.openapi.from_url(s.url + "/openapi.json")

        @settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=schema.as_strategy(generation_mode=mode))
        def check(case):
            if mode is GenerationMode.POSITIVE:
                case.call_and_validate(base_url=s.url)
                return
            # Invalid data must be rejected with a 4xx. schemathesis' own rejection check does not count 413, which
            # is what an over-long field or too many items rightly get: that one check is replaced by ours.
            r = case.call_and_validate(base_url=s.url, excluded_checks=[negative_data_rejection])
            if case.operation.method.upper() == "POST":
                assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])

        check()
