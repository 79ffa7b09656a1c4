/* Bitwise CRC-32 (IEEE 802.3, reflected, as zlib.crc32) of a 200-byte message built from
 * bytes, halfwords and words written through different pointer types. */
#include <stdint.h>

static uint8_t msg[200];

static uint32_t crc32(const uint8_t *p, int n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (int i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

int main(void) {
    for (int i = 0; i < 64; i++) msg[i] = (uint8_t)(i * 7 + 3);
    volatile uint16_t *h = (volatile uint16_t *)&msg[64];
    for (int i = 0; i < 32; i++) h[i] = (uint16_t)(0x8001u * (i + 1));
    volatile uint32_t *w = (volatile uint32_t *)&msg[128];
    for (int i = 0; i < 18; i++) w[i] = 0x9E3779B9u * (uint32_t)(i + 1);
    return (int)crc32(msg, sizeof msg);
}
