int cbluez_placeholder(void) { return 0; }
