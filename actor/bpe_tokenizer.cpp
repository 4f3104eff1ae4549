// HF tokenizer.json byte-level BPE (placeholder until it lands).
