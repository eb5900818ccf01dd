// cubec CPU backend — user-space context switch for barrier fibers.
//
//   void cube_cpu_fiber_switch(void **save_sp, void *to_sp);
//
// Saves the callee-saved registers on the current stack (not the MXCSR and
// x87 control words: loading them serializes the core, units of one cube
// share one thread's floating-point mode, and the dialect never changes it), stores the stack pointer in *save_sp, loads to_sp and
// restores the same frame from there. A fresh fiber's frame (built by
// cube_cpu_context_prepare) "returns" into cube_cpu_fiber_trampoline, which
// calls entry(arg) with both taken from callee-saved registers. No syscalls:
// that is why this is not swapcontext.

#if defined(__x86_64__)

        .text
        .globl  cube_cpu_fiber_switch
        .hidden cube_cpu_fiber_switch
        .type   cube_cpu_fiber_switch, @function
        .p2align 4
cube_cpu_fiber_switch:
        .cfi_startproc
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $16, %rsp               // two spare slots keep the frame layout
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        addq    $16, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .cfi_endproc
        .size   cube_cpu_fiber_switch, .-cube_cpu_fiber_switch

        .globl  cube_cpu_fiber_trampoline
        .hidden cube_cpu_fiber_trampoline
        .type   cube_cpu_fiber_trampoline, @function
        .p2align 4
cube_cpu_fiber_trampoline:
        movq    %r12, %rdi
        callq   *%r13
        ud2                             // entry never returns
        .size   cube_cpu_fiber_trampoline, .-cube_cpu_fiber_trampoline

#elif defined(__aarch64__)

        .text
        .globl  cube_cpu_fiber_switch
        .hidden cube_cpu_fiber_switch
        .type   cube_cpu_fiber_switch, %function
        .p2align 4
cube_cpu_fiber_switch:
        sub     sp, sp, #176
        stp     x19, x20, [sp, #0]
        stp     x21, x22, [sp, #16]
        stp     x23, x24, [sp, #32]
        stp     x25, x26, [sp, #48]
        stp     x27, x28, [sp, #64]
        stp     x29, x30, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        mrs     x9, fpcr
        str     x9, [sp, #160]
        mov     x9, sp
        str     x9, [x0]
        mov     sp, x1
        ldp     x19, x20, [sp, #0]
        ldp     x21, x22, [sp, #16]
        ldp     x23, x24, [sp, #32]
        ldp     x25, x26, [sp, #48]
        ldp     x27, x28, [sp, #64]
        ldp     x29, x30, [sp, #80]
        ldp     d8, d9, [sp, #96]
        ldp     d10, d11, [sp, #112]
        ldp     d12, d13, [sp, #128]
        ldp     d14, d15, [sp, #144]
        ldr     x9, [sp, #160]
        msr     fpcr, x9
        add     sp, sp, #176
        ret
        .size   cube_cpu_fiber_switch, .-cube_cpu_fiber_switch

        .globl  cube_cpu_fiber_trampoline
        .hidden cube_cpu_fiber_trampoline
        .type   cube_cpu_fiber_trampoline, %function
        .p2align 4
cube_cpu_fiber_trampoline:
        mov     x0, x19
        blr     x20
        brk     #0                      // entry never returns
        .size   cube_cpu_fiber_trampoline, .-cube_cpu_fiber_trampoline

#else
#error "cubec CPU backend: no fiber switch for this architecture (x86-64 and aarch64 only)"
#endif

        .section .note.GNU-stack,"",%progbits
