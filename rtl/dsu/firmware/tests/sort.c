/* Insertion sort of a pseudo-random array (xorshift32), then a checksum of the sorted
 * array. main returns sum(i * a[i]) mod 2**32, or 0xbad0000+i if a[i-1] > a[i]. */
#include <stdint.h>

#define N 48
static int32_t a[N];

int main(void) {
    uint32_t x = 0x2545F491u;
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        a[i] = (int32_t)x >> 8;          /* signed values, both signs */
    }
    for (int i = 1; i < N; i++) {
        int32_t v = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; }
        a[j + 1] = v;
    }
    uint32_t sum = 0;
    for (int i = 0; i < N; i++) {
        if (i && a[i - 1] > a[i]) return 0xbad0000 + i;
        sum += (uint32_t)i * (uint32_t)a[i];
    }
    return (int)sum;
}
