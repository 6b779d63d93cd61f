/*
 * ssh-dl.c - load libssh2 and libcrypto on first use (see ssh-dl.h).
 */
#define DT_SSH_DL_IMPL
#include "ssh-dl.h"
#include "usage.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define SSH2_SONAME "libssh2.so.1"
#define CRYPTO_SONAME "libcrypto.so." STR(OPENSSL_VERSION_MAJOR)

static struct dt_ssh_lib lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static const char *lib_missing;             /* "soname: dlerror()" when loading failed */
static char lib_err[512];

static void *sym(void *h, const char *soname, const char *name)
{
	void *p = h ? dlsym(h, name) : NULL;

	if (!p && !lib_missing) {
		snprintf(lib_err, sizeof(lib_err), "%s: %s", soname, dlerror());
		lib_missing = lib_err;
	}
	return p;
}

static void lib_load(void)
{
	void *ssh2 = dlopen(SSH2_SONAME, RTLD_NOW | RTLD_LOCAL);
	void *crypto = ssh2 ? dlopen(CRYPTO_SONAME, RTLD_NOW | RTLD_LOCAL) : NULL;

#define LOAD_SSH2(f) lib.f = (__typeof__(f) *)sym(ssh2, SSH2_SONAME, #f);
#define LOAD_CRYPTO(f) lib.f = (__typeof__(f) *)sym(crypto, CRYPTO_SONAME, #f);
	DT_SSH2_FUNCS(LOAD_SSH2)
	DT_CRYPTO_FUNCS(LOAD_CRYPTO)
#undef LOAD_SSH2
#undef LOAD_CRYPTO
}

const struct dt_ssh_lib *dt_ssh_lib(void)
{
	pthread_once(&lib_once, lib_load);
	if (lib_missing)
		die("cannot load the SSH library (%s); install libssh2 (apt install libssh2-1)",
		    lib_missing);
	return &lib;
}
