"""gpu_accel.LLM on models/stories260K.gguf, compared with the gpu-accel CLI."""

import os
import pathlib
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import gpu_accel

PROMPT = "Once upon a time"


def cli_run(cli, model_path, *args):
    r = subprocess.run([str(cli), "run", "-m", str(model_path), *args], capture_output=True, check=True)
    return r.stdout.decode("utf-8")


def test_greedy_generation_equals_the_cli(cli, model_path, llm):
    expected = cli_run(cli, model_path, "-p", PROMPT, "-n", "32", "--temp", "0")
    assert expected  # the model writes something
    assert llm.generate(PROMPT, max_tokens=32, temperature=0) == expected


def test_seeded_sampling_equals_the_cli(cli, model_path, llm):
    expected = cli_run(cli, model_path, "-p", PROMPT, "-n", "24", "--temp", "0.9", "--seed", "42")
    assert llm.generate(PROMPT, max_tokens=24, temperature=0.9, seed=42) == expected


def test_streaming_pieces_join_to_the_text(llm):
    text = llm.generate(PROMPT, max_tokens=32, temperature=0)
    pieces = list(llm.generate(PROMPT, max_tokens=32, temperature=0, stream=True))
    assert len(pieces) > 1
    assert "".join(pieces) == text


def test_closing_a_stream_cancels_it_and_the_llm_stays_usable(llm):
    stream = llm.generate(PROMPT, max_tokens=-1, temperature=0, stream=True)
    first = next(stream)
    assert first
    stream.close()
    assert llm.generate(PROMPT, max_tokens=4, temperature=0)


def test_generate_releases_the_gil(llm):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        llm.generate(PROMPT, max_tokens=200, temperature=0, ignore_eos=True)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 1


def test_tokenize_detokenize_round_trip(llm):
    ids = llm.tokenize(PROMPT)
    info = llm.info()
    assert ids[0] == info["bos"]
    assert llm.detokenize(ids) == PROMPT
    assert llm.tokenize(PROMPT, add_special=False) == ids[1:]


def test_token_prompt_equals_text_prompt(llm):
    assert llm.generate(llm.tokenize(PROMPT), max_tokens=16, temperature=0) == \
        llm.generate(PROMPT, max_tokens=16, temperature=0)


def test_logits(llm):
    ids = llm.tokenize(PROMPT)
    all_rows = llm.logits(ids)
    assert all_rows.dtype == np.float32 and all_rows.shape == (len(ids), llm.n_vocab)
    last = llm.logits(ids, last_only=True)
    assert last.shape == (llm.n_vocab,)
    np.testing.assert_allclose(all_rows[-1], last, rtol=1e-5, atol=1e-5)
    # greedy generation's first token is the argmax of the prompt's last row
    first = llm.generate(ids, max_tokens=1, temperature=0)
    assert first == llm.token_to_piece(int(np.argmax(last)))


def test_chat_uses_the_template(llm):
    messages = [{"role": "user", "content": "Tell me a story."}]
    prompt = llm.chat_prompt(messages)
    assert "Tell me a story." in prompt
    reply = llm.chat(messages, max_tokens=8, temperature=0)
    assert isinstance(reply, str)
    with pytest.raises(ValueError, match="role"):
        llm.chat([{"content": "no role"}])


def test_bad_arguments_raise_value_error(llm):
    with pytest.raises(ValueError, match="temperature"):
        llm.generate(PROMPT, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        llm.generate(PROMPT, top_p=2.0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.logits([llm.n_vocab])
    with pytest.raises(ValueError, match="device"):
        gpu_accel.LLM("whatever.gguf", device="tpu")


def test_missing_model_file_is_an_engine_error(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(gpu_accel.Error) as e:
        gpu_accel.LLM(missing, device="cpu")
    assert isinstance(e.value, RuntimeError)
    assert str(missing) in str(e.value)
    assert e.value.kind == "io"


def test_context_overflow_is_an_engine_error(model_path):
    small = gpu_accel.LLM(model_path, device="cpu", n_ctx=8, threads=1)
    with pytest.raises(gpu_accel.Error):
        small.logits(list(range(1, 20)))


def test_ctrl_c_stops_a_generation(llm):
    # A whole context of stories260K takes ~1 s on a CI core; the signal comes after 50 ms. Python's own
    # handler is installed for the test: a shell that starts the run in the background ignores SIGINT.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        llm.generate(PROMPT, max_tokens=-1, ignore_eos=True, temperature=0)
        time.sleep(1.0)  # the generation ended first: the signal lands here instead
        pytest.fail("no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    elapsed = time.monotonic() - start
    if elapsed >= 1.0:
        pytest.skip(f"the generation ended before the signal ({elapsed:.2f} s)")
    assert llm.generate(PROMPT, max_tokens=4, temperature=0)  # still usable


def test_tensor_parallel_gives_the_same_text_and_logits(model_path, llm):
    split = gpu_accel.LLM(model_path, device="cpu", tensor_parallel=2)
    assert "tensor parallel over 2 ranks" in split.info()["device_description"]
    assert split.generate(PROMPT, max_tokens=24, temperature=0) == llm.generate(PROMPT, max_tokens=24, temperature=0)
    a, b = split.logits([1, 403, 407]), llm.logits([1, 403, 407])
    assert np.allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(b).max()))
    with pytest.raises(ValueError):
        gpu_accel.LLM(model_path, device="cpu", tensor_parallel=0)
    with pytest.raises(gpu_accel.Error, match="does not divide by 3"):
        gpu_accel.LLM(model_path, device="cpu", tensor_parallel=3)


def test_context_parallel_gives_the_same_text_and_logits(model_path, llm):
    split = gpu_accel.LLM(model_path, device="cpu", context_parallel=3)
    assert "context parallel over 3 ranks" in split.info()["device_description"]
    assert split.generate(PROMPT, max_tokens=24, temperature=0) == llm.generate(PROMPT, max_tokens=24, temperature=0)
    a, b = split.logits([1, 403, 407, 261, 378]), llm.logits([1, 403, 407, 261, 378])
    assert np.allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(b).max()))
    with pytest.raises(ValueError):
        gpu_accel.LLM(model_path, device="cpu", context_parallel=0)
    with pytest.raises(gpu_accel.Error, match="tensor parallelism"):
        gpu_accel.LLM(model_path, device="cpu", context_parallel=2, tensor_parallel=2)


def test_kv_type_option_mirrors_the_cli(model_path):
    f32 = gpu_accel.LLM(model_path, device="cpu", threads=1)
    assert f32.info()["kv_type"] == "f32"  # the CPU's default
    fp8 = gpu_accel.LLM(model_path, device="cpu", threads=1, kv_type="fp8")
    assert fp8.info()["kv_type"] == "fp8"
    a, b = fp8.logits([1, 403, 407, 261]), f32.logits([1, 403, 407, 261])
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    assert 0 < rel < 0.15  # tests/runtime/test_fp8_kv_cache.cpp's bar for stories260K
    with pytest.raises(ValueError, match="kv_type: unknown KV cache type 'xyz'.*fp8"):
        gpu_accel.LLM(model_path, device="cpu", kv_type="xyz")
    with pytest.raises(ValueError, match="f16 or fp8"):
        gpu_accel.LLM(model_path, device="cuda", kv_type="f32")


def test_precision_option_mirrors_the_cli(model_path, llm):
    fixture = pathlib.Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "quant" / "fixture-f32.gguf"
    native = gpu_accel.LLM(fixture, device="cpu", threads=1)
    assert native.info()["precision"] == "native"
    fp8 = gpu_accel.LLM(fixture, device="cpu", threads=1, precision="fp8", precision_keep=[])
    info = fp8.info()
    assert info["precision"] == "fp8"
    assert info["precision_detail"].startswith("fp8; 14 matrices F8_B128")
    assert "weights fp8" in info["device_description"]
    a, b = fp8.logits([1, 403, 407]), native.logits([1, 403, 407])
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    assert 0 < rel < 6.5e-2  # tests/model/test_precision.cpp's bar
    kept = gpu_accel.LLM(fixture, device="cpu", threads=1, precision="fp8", precision_keep="-1")
    assert "7 matrices F8_B128" in kept.info()["precision_detail"]
    assert gpu_accel.LLM(model_path, device="cpu", precision="auto").info()["precision"] == "native"  # the CPU
    with pytest.raises(ValueError, match="precision: unknown precision 'fp9'"):
        gpu_accel.LLM(model_path, device="cpu", precision="fp9")
    with pytest.raises(ValueError, match="precision_keep: .*'0,x'"):
        gpu_accel.LLM(model_path, device="cpu", precision="fp8", precision_keep="0,x")
    with pytest.raises(ValueError, match="precision_keep: layer 9 is outside"):
        gpu_accel.LLM(model_path, device="cpu", precision="fp8", precision_keep=[9])
