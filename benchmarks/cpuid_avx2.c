/* An AVX2 machine's CPUID on an AVX-512 one, for benchmarks only (LD_PRELOAD; Linux x86-64 with cpuid_fault).
 *
 * Why: ONNX Runtime's MLAS (and numpy, oneDNN, OpenVINO, PyTorch) pick their kernels from the CPUID instruction,
 * and MLAS has no switch to cap them. The kernel's CPUID faulting (arch_prctl ARCH_SET_CPUID 0) makes every CPUID
 * in the process trap; the handler below runs the real instruction and clears the AVX-512, VNNI, BF16, FP16 and AMX
 * feature bits before returning, so every library takes the path an AVX2-only CPU gets. Everything else runs
 * natively at full speed: only CPUID itself (a few calls at library load) is slower.
 *
 * Faulting is per thread but inherited by threads and forks, and reset on execve (the constructor runs again in the
 * new image because LD_PRELOAD is inherited). A library that installs its own SIGSEGV handler would take the fault
 * instead of us, so sigaction() and signal() for SIGSEGV are interposed (GCC's cc1plus installs its crash handler with
 * signal()): the newcomer is remembered and called for every SIGSEGV that is not a CPUID.
 *
 *     gcc -O2 -shared -fPIC -o cpuid_avx2.so cpuid_avx2.c -ldl
 *     LD_PRELOAD=$PWD/cpuid_avx2.so python -c "import numpy; numpy.show_runtime()"
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static struct sigaction next_segv; /* the handler a library installed after us, chained for real faults */
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static unsigned long traps; /* CPUIDs served, so a benchmark can show none fell in its timed loop */
unsigned long cpuid_avx2_traps(void) { return __atomic_load_n(&traps, __ATOMIC_RELAXED); }

static long set_cpuid(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static void mask(uint32_t leaf, uint32_t sub, uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d) {
    if (leaf == 7 && sub == 0) {
        /* EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 */
        *b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        /* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 */
        *c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, FP16 23, AMX-TILE 24, AMX-INT8 25 */
        *d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        /* EAX: AVX-VNNI 4, AVX512_BF16 5, AMX-FP16 21, AVX-IFMA 23; EDX: AVX-VNNI-INT8 4, AVX10 19 */
        *a &= ~((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23));
        *d &= ~((1u << 4) | (1u << 19));
    } else if (leaf == 0x24) { /* AVX10 */
        *a = *b = *c = *d = 0;
    }
}

static void on_segv(int sig, siginfo_t *info, void *uctx) {
    ucontext_t *uc = uctx;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (ip && ip[0] == 0x0f && ip[1] == 0xa2) {
        uint32_t leaf = (uint32_t)r[REG_RAX], sub = (uint32_t)r[REG_RCX], a, b, c, d;
        set_cpuid(1);
        __cpuid_count(leaf, sub, a, b, c, d);
        set_cpuid(0);
        mask(leaf, sub, &a, &b, &c, &d);
        __atomic_fetch_add(&traps, 1, __ATOMIC_RELAXED);
        r[REG_RAX] = a; r[REG_RBX] = b; r[REG_RCX] = c; r[REG_RDX] = d;
        r[REG_RIP] += 2;
        return;
    }
    if (next_segv.sa_flags & SA_SIGINFO && next_segv.sa_sigaction) {
        next_segv.sa_sigaction(sig, info, uctx);
        return;
    }
    if (next_segv.sa_handler != SIG_DFL && next_segv.sa_handler != SIG_IGN && next_segv.sa_handler) {
        next_segv.sa_handler(sig);
        return;
    }
    struct sigaction dfl; /* a real fault: die of it as the process would have */
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
    raise(SIGSEGV);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction)
        real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGSEGV)
        return real_sigaction(sig, act, old);
    if (old)
        *old = next_segv;
    if (act)
        next_segv = *act;
    return 0;
}

typedef void (*handler_t)(int);

handler_t signal(int sig, handler_t fn) {
    if (sig != SIGSEGV) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = fn;
        sa.sa_flags = SA_RESTART; /* glibc's signal() is BSD-style */
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &old) != 0)
            return SIG_ERR;
        return old.sa_handler;
    }
    handler_t old = next_segv.sa_flags & SA_SIGINFO ? SIG_DFL : next_segv.sa_handler;
    memset(&next_segv, 0, sizeof next_segv);
    next_segv.sa_handler = fn;
    return old;
}

__attribute__((constructor)) static void install(void) {
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (real_sigaction(SIGSEGV, &sa, NULL) != 0 || set_cpuid(0) != 0)
        _exit(97); /* no faulting here: better no run than a run that silently kept AVX-512 */
}
