/* MMIO rejection test: every bad access must be refused with the right CMD_STATUS and change
 * nothing. results[k] = CMD_STATUS after access k (the host compares with the expected list);
 * main returns the number of results. */
#include <stdint.h>
#include "dsu_regs.h"

__attribute__((used)) volatile uint32_t results[32];
static uint32_t n;

static void rec(void) { results[n++] = DSU_CMD_STATUS; }

int main(void) {
    uint32_t hart;
    __asm__ volatile("csrr %0, mhartid" : "=r"(hart));
    if (hart != 0) { DSU_CORE_IDLE = 1; for (;;) __asm__ volatile("wfi"); }
    uint32_t slots = DSU_N_SLOTS;
    DSU_REG(0x1f0u) = 1; rec();                                   /* 0 unknown address (write) */
    (void)DSU_REG(0x1f4u); rec();                                 /* 1 unknown address (read) */
    DSU_PROFILE = 2; rec();                                       /* 2 valid profile: OK */
    DSU_PROFILE = 3; rec();                                       /* 3 invalid profile */
    results[n++] = DSU_PROFILE;                                   /* 4 still 2 */
    DSU_ADMIT = slots; rec();                                     /* 5 slot out of range */
    (void)DSU_SLOT(slots, DSU_SLOT_STATE); rec();                 /* 6 read slot out of range */
    DSU_ID = 0; rec();                                            /* 7 read-only register */
    DSU_SLOT(0, DSU_SLOT_SEQ_LEN) = 5; rec();                     /* 8 slot window is read-only */
    DSU_MAX_RETRIES = 16; rec();                                  /* 9 out of range */
    DSU_WATCHDOG_LIMIT = 0; rec();                                /* 10 zero limit */
    DSU_ADMIT = 0; rec();                                         /* 11 intake empty */
    DSU_REJECT = 0; rec();                                        /* 12 bad reason */
    DSU_BATCH(7) = 1; rec();                                      /* 13 batch bit >= N_SLOTS */
    DSU_BATCH(0) = 1; rec();                                      /* 14 batch bit on slot 0: OK */
    DSU_ISSUE = 1; rec();                                         /* 15 slot 0 is FREE: bad batch */
    DSU_BATCH(0) = 0; rec();                                      /* 16 OK */
    results[n++] = DSU_BAD_ACCESSES;                              /* 17 rejected so far */
    results[n++] = DSU_ROUND;                                     /* 18 nothing issued: 0 */
    return (int)n;
}
