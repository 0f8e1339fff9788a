#pragma once
int cbluez_placeholder(void);
