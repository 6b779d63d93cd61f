/*
 * sanitize.h - LeakSanitizer defaults of each program, in sanitizer builds only.
 *
 * DT_LSAN_DEFAULTS(extra) defines __lsan_default_suppressions() (the runtime
 * calls it at start); use it once, in the file with main().  Every program
 * suppresses one false positive: the sanitizer runtime's own call of
 * pthread_getattr_np() when a thread starts, whose glibc allocation
 * (pthread_attr_setaffinity_np) is never freed; it shows when a program
 * exits while threads (OpenMP, dtsched's launchers) are still alive.
 * `extra` adds "leak:..." lines for one program's libraries.
 */
#ifndef DT_SANITIZE_H
#define DT_SANITIZE_H

#if defined(__SANITIZE_ADDRESS__) || defined(DT_FUZZING)
#define DT_LSAN_DEFAULTS(extra) \
	const char *__lsan_default_suppressions(void); \
	const char *__lsan_default_suppressions(void) \
	{ \
		return "leak:GetThreadStackTopAndBottom\n" extra; \
	} \
	const char *__lsan_default_options(void); \
	const char *__lsan_default_options(void) \
	{ \
		return "print_suppressions=0"; /* keep stderr what the program wrote */ \
	}
#else
#define DT_LSAN_DEFAULTS(extra)
#endif

#endif
