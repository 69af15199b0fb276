#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py with ONE change: the Qwen2-MoE and Qwen3-MoE model classes
take their vocabulary from tokenizer.model through the converter's own
TextModel._set_vocab_sentencepiece(), as Qwen2/Qwen3 (dense) already do.

Why: Qwen2MoeModel inherits TextModel.set_vocab, which only knows the GPT-2 BPE path (it needs a
tokenizer.json / vocab.json and a known pre-tokenizer hash), so the unmodified converter refuses a folder
that holds only a SentencePiece tokenizer.model; Qwen3MoeModel.set_vocab calls that same method.
Nothing else is touched: hyperparameters, tensor names, shapes, types and data go through the
converter's own code unchanged.

    python3 convert_sp_vocab.py LLAMACPP_DIR HF_DIR --outtype f32 --outfile model.gguf

LLAMACPP_DIR is the extracted llama.cpp source; the remaining arguments go to convert_hf_to_gguf.py.
Run it with PYTHONPATH=LLAMACPP_DIR/gguf-py, from LLAMACPP_DIR, like the converter itself.
"""
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llamacpp = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(llamacpp))
    sys.path.insert(1, str(llamacpp / "gguf-py"))

    import conversion.qwen as qwen  # the module the converter loads for these architectures

    def set_vocab(self):
        self._set_vocab_sentencepiece()

    qwen.Qwen2MoeModel.set_vocab = set_vocab
    qwen.Qwen3MoeModel.set_vocab = set_vocab

    import convert_hf_to_gguf
    sys.argv = [str(llamacpp / "convert_hf_to_gguf.py")] + sys.argv[2:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
