// Tests for the HF byte-level BPE tokenizer (placeholder until it lands).
