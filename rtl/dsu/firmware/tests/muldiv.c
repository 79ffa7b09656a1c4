/* Checksum over MUL/MULH/MULHSU/MULHU/DIV/DIVU/REM/REMU on edge and pseudo-random
 * operands, including division by zero and INT_MIN / -1 (defined results in RISC-V). */
#include <stdint.h>

static volatile int32_t edge[] = {0, 1, -1, -7, 0x7FFFFFFF, (int32_t)0x80000000, 0x10000,
                                  -98765};
#define NE (int)(sizeof edge / sizeof edge[0])

static uint32_t mix(uint32_t h, uint32_t v) { return (h ^ v) * 0x01000193u; }

static int32_t divs(int32_t a, int32_t b) { int32_t q; __asm__("div %0,%1,%2" : "=r"(q) : "r"(a), "r"(b)); return q; }
static int32_t rems(int32_t a, int32_t b) { int32_t r; __asm__("rem %0,%1,%2" : "=r"(r) : "r"(a), "r"(b)); return r; }
static uint32_t divu(uint32_t a, uint32_t b) { uint32_t q; __asm__("divu %0,%1,%2" : "=r"(q) : "r"(a), "r"(b)); return q; }
static uint32_t remu(uint32_t a, uint32_t b) { uint32_t r; __asm__("remu %0,%1,%2" : "=r"(r) : "r"(a), "r"(b)); return r; }

int main(void) {
    uint32_t h = 0x811C9DC5u;
    uint32_t x = 1;
    for (int i = 0; i < NE + 2; i++) {
        for (int j = 0; j < NE + 2; j++) {
            int32_t a, b;
            if (i < NE) a = edge[i]; else { x = x * 1664525u + 1013904223u; a = (int32_t)x; }
            if (j < NE) b = edge[j]; else { x = x * 1664525u + 1013904223u; b = (int32_t)x; }
            h = mix(h, (uint32_t)(a * b));
            h = mix(h, (uint32_t)(((int64_t)a * b) >> 32));
            h = mix(h, (uint32_t)(((int64_t)a * (uint64_t)(uint32_t)b) >> 32));
            h = mix(h, (uint32_t)(((uint64_t)(uint32_t)a * (uint32_t)b) >> 32));
            h = mix(h, (uint32_t)divs(a, b));
            h = mix(h, (uint32_t)rems(a, b));
            h = mix(h, divu((uint32_t)a, (uint32_t)b));
            h = mix(h, remu((uint32_t)a, (uint32_t)b));
        }
    }
    return (int)h;
}
