/* Reset entry of DSU firmware: set the stack, clear .bss, call main, publish its return
 * value in `_exit_code`, then spin at `_halt` (testbenches stop when `_halt` retires). */
    .section .text.start, "ax"
    .globl _start
_start:
    la      sp, __stack_top
    la      t0, __bss_start
    la      t1, __bss_end
1:  bgeu    t0, t1, 2f
    sw      zero, 0(t0)
    addi    t0, t0, 4
    j       1b
2:  call    main
    la      t0, _exit_code
    sw      a0, 0(t0)
    .globl _halt
_halt:
    j       _halt

    .section .sdata._exit_code, "aw"
    .balign 4
    .globl _exit_code
_exit_code:
    .word   0xdeadbeef
