"""gpu_accel.LLM: a model, its tokenizer and one sequence's session."""

import queue
import random
import threading

from . import _C


class LLM:
    """A loaded model with one sequence's session.

    path: a .gguf file or a Hugging Face model folder. device: "auto" (the first GPU when one exists and the
    model's types run there, else the CPU), "cpu", "cuda" or "cuda:N". n_ctx: context size in tokens (0: the
    model's, capped at 4096). threads: CPU threads (0: all cores). warm_up: run the forward once on throw-away
    tokens first, as the CLI does (the first prompt then pays no one-time costs). tensor_parallel: split the model
    over this many CPU ranks of this process (the CLI's --tensor-parallel; device "cpu"), same logits.
    context_parallel: shard the sequence's positions and KV cache over this many CPU ranks (--context-parallel;
    ring attention for the prompt, the pass-Q merge for decode), same logits; not with tensor_parallel.
    precision: the weights at load, the CLI's --precision: "native" (as stored), "bf16", "fp8" (the layer matrices
    as F8_B128 blocks) or "auto" (fp8 on a GPU with FP8 tensor cores for a 16/32-bit float model, else native).
    precision_keep: fp8's layers kept as stored (--precision-keep): a list of indices or a "0,-1" string.
    kv_type: the KV cache, the CLI's --kv-type: "f16", "fp8" (E4M3 codes with a float scale per position and KV
    head: ~half the bytes) or "f32" (the CPU only); None: f32 on the CPU, f16 on a GPU. info()["kv_type"] says
    which the session keeps.

    Each generate()/chat()/logits() call starts from an empty context; calls on one LLM run one at a time.
    """

    def __init__(self, path, device="auto", n_ctx=0, threads=0, warm_up=True, tensor_parallel=1, context_parallel=1,
                 precision="native", precision_keep="0,-1", kv_type=None):
        if not isinstance(precision_keep, str):
            precision_keep = ",".join(str(int(i)) for i in precision_keep) if len(precision_keep) else "none"
        self._engine = _C.Engine(str(path), device, int(n_ctx), int(threads), bool(warm_up), int(tensor_parallel),
                                 int(context_parallel), str(precision), precision_keep,
                                 "" if kv_type is None else str(kv_type))
        info = self._engine.info()
        self.n_vocab = info["n_vocab"]
        self.n_ctx = info["n_ctx"]
        self.device = info["device"]

    def __repr__(self):
        info = self._engine.info()
        return f"LLM({info['path']!r}, arch={info['arch']!r}, device={info['device']!r}, n_ctx={info['n_ctx']})"

    def info(self):
        """The model's and session's facts: arch, name, n_vocab, n_layer, n_ctx, device, bos, eos, ..."""
        return dict(self._engine.info())

    # ---- tokens ----
    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids of text; add_special: BOS/EOS as the vocabulary says; parse_special: text spelling a
        special token (e.g. "<|im_end|>") becomes that token."""
        return self._engine.tokenize(text, bool(add_special), bool(parse_special))

    def detokenize(self, ids, render_special=False):
        """The text of token ids (control tokens give "" unless render_special). Bytes that are not valid
        UTF-8 (a character split across the ids' end) become U+FFFD."""
        return self._engine.detokenize([int(i) for i in ids], bool(render_special))

    def token_to_piece(self, token_id, render_special=False):
        return self._engine.token_to_piece(int(token_id), bool(render_special))

    # ---- logits ----
    def logits(self, tokens, last_only=False):
        """Evaluates tokens (ids, or a str tokenized with BOS) as a new sequence at positions 0..n-1 and returns
        the logits: a float32 numpy array [n_tokens, n_vocab] (row t predicts token t+1), or with last_only the
        last row [n_vocab] (what llama-cpp-python's eval with logits_all=False keeps)."""
        if isinstance(tokens, str):
            tokens = self.tokenize(tokens)
        return self._engine.logits([int(t) for t in tokens], bool(last_only))

    # ---- generation ----
    def generate(self, prompt, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, repeat_last_n=64, frequency_penalty=0.0, presence_penalty=0.0, seed=None,
                 stop=None, ignore_eos=False, add_bos=True, parse_special=False, stream=False):
        """Continues prompt (a str, or a list of token ids used as given) and returns the generated text.

        The options are `gpu-accel run`'s: temperature 0 is greedy; top_k 0, top_p 1, min_p 0 and
        repeat_penalty 1 turn a filter off; max_tokens -1 runs until the context is full; seed None draws one
        at random (pass an int to reproduce a run); stop: strings that end generation (not included);
        add_bos=False is the CLI's --no-bos. stream=True returns an iterator of text pieces instead (each
        complete UTF-8, never part of a stop string); closing it early cancels the generation.
        """
        args = self._sampling_args(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                   frequency_penalty, presence_penalty, seed, stop, ignore_eos)
        if isinstance(prompt, str):
            call = lambda on_text: self._engine.generate_text(prompt, args, bool(add_bos), bool(parse_special),
                                                              on_text)
        else:
            tokens = [int(t) for t in prompt]
            call = lambda on_text: self._engine.generate_tokens(tokens, args, on_text)
        return self._stream(call) if stream else call(None)[0]

    def chat(self, messages, stream=False, **options):
        """The assistant's reply to messages (a list of {"role": ..., "content": ...} dicts), rendered with
        the model's chat template (ChatML when the model has none). Options as generate()'s."""
        tokens = self._engine.chat_tokens(_chat_pairs(messages))
        return self.generate(tokens, stream=stream, **options)

    def chat_prompt(self, messages):
        """The prompt text chat() would evaluate for messages (the rendered template)."""
        return self._engine.chat_prompt(_chat_pairs(messages))

    # ---- helpers ----
    @staticmethod
    def _sampling_args(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                       frequency_penalty, presence_penalty, seed, stop, ignore_eos):
        a = _C.SamplingArgs()
        a.max_tokens = int(max_tokens)
        a.temperature = float(temperature)
        a.top_k = int(top_k)
        a.top_p = float(top_p)
        a.min_p = float(min_p)
        a.repeat_penalty = float(repeat_penalty)
        a.repeat_last_n = int(repeat_last_n)
        a.frequency_penalty = float(frequency_penalty)
        a.presence_penalty = float(presence_penalty)
        if seed is None:
            seed = random.SystemRandom().getrandbits(64)
        if not 0 <= int(seed) < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        a.seed = int(seed)
        if isinstance(stop, str):
            stop = [stop]
        a.stop = list(stop or [])
        a.ignore_eos = bool(ignore_eos)
        return a

    @staticmethod
    def _stream(call):
        """Runs call(on_text) on a thread; yields the pieces as they come. Closing the iterator cancels."""
        pieces = queue.Queue()
        cancelled = threading.Event()
        done = object()
        failure = []

        def on_text(piece):
            pieces.put(piece)
            return not cancelled.is_set()

        def worker():
            try:
                call(on_text)
            except BaseException as e:  # re-raised in the consumer
                failure.append(e)
            finally:
                pieces.put(done)

        def iterate():
            thread = threading.Thread(target=worker, name="gpu_accel-generate", daemon=True)
            thread.start()
            try:
                while True:
                    piece = pieces.get()
                    if piece is done:
                        break
                    yield piece
            finally:
                cancelled.set()
                thread.join()
            if failure:
                raise failure[0]

        return iterate()


def _chat_pairs(messages):
    pairs = []
    for i, m in enumerate(messages):
        try:
            pairs.append((str(m["role"]), str(m["content"])))
        except (KeyError, TypeError):
            raise ValueError(f"chat: message {i} must be a dict with 'role' and 'content'") from None
    return pairs


__all__ = ["LLM"]
