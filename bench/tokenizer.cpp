int main() { return 0; }  // placeholder until the tokenizer benchmark lands
