/*
 * test_container.c - the podman argv of a rank in a container image
 * (agent/container.h): host network and pid, the task's GPUs only (CDI names
 * or device nodes), variables passed by name, the dirs at the same paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/container.h"

static int has(const struct strvec *v, const char *s)
{
	return strvec_find(v, s) >= 0;
}

static void run_argv(const struct container_run *r, struct strvec *out, struct strvec *set,
		     struct strbuf *notes)
{
	struct strvec argv = STRVEC_INIT, pass = STRVEC_INIT;

	strvec_pushv(&argv, (const char *[]){ "python", "train.py", "--lr", "3e-4", NULL });
	strvec_pushv(&pass, (const char *[]){ "RANK", "NCCL_SOCKET_IFNAME", NULL });
	container_run_argv(r, &argv, &pass, out, set, notes);
	strvec_clear(&argv);
	strvec_clear(&pass);
}

static void test_argv(void **state)
{
	struct container_run r = { .engine = "/usr/bin/podman",
				   .ref = CONTAINER_IMAGE_REPO ":abc", .name = "dtctl-j.0.r1-12345678",
				   .cwd = "/shared/proj", .submit_dir = "/shared/proj",
				   .shared_dir = "/shared" };
	struct strvec out = STRVEC_INIT, set = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT;

	run_argv(&r, &out, &set, &notes);
	assert_string_equal(out.v[0], "/usr/bin/podman");
	assert_string_equal(out.v[1], "run");
	assert_true(has(&out, "--rm") && has(&out, "--network=host") && has(&out, "--pid=host"));
	assert_true(has(&out, "--name=dtctl-j.0.r1-12345678"));
	assert_true(has(&out, "--pull=never"));             /* our own image: never a registry */
	assert_true(has(&out, "--entrypoint="));
	assert_true(has(&out, "--volume=/shared:/shared"));
	assert_false(has(&out, "--volume=/shared/proj:/shared/proj"));   /* below the shared dir */
	assert_true(has(&out, "--workdir=/shared/proj"));
	assert_true(has(&out, "--env=RANK") && has(&out, "--env=NCCL_SOCKET_IFNAME"));
	/* the image, then the job's argv word for word */
	assert_string_equal(out.v[out.nr - 5], CONTAINER_IMAGE_REPO ":abc");
	assert_string_equal(out.v[out.nr - 4], "python");
	assert_string_equal(out.v[out.nr - 1], "3e-4");
	assert_int_equal(set.nr, 0);
	assert_int_equal(notes.len, 0);
	strvec_clear(&out);
	/* a name the engine pulls; a submit dir off the shared dir is mounted too */
	r.ref = "docker.io/library/debian:12";
	r.submit_dir = r.cwd = "/home/u/proj";
	run_argv(&r, &out, &set, &notes);
	assert_false(has(&out, "--pull=never"));
	assert_true(has(&out, "--volume=/home/u/proj:/home/u/proj"));
	strvec_clear(&out);
	strbuf_release(&notes);
}

/* team mode: the owner's ids and groups, no capabilities, no_new_privs, variables from a file */
static void test_team_user(void **state)
{
	gid_t groups[] = { 1001, 27, 100 };
	struct container_user u = { 1001, 1001, groups, 3 };
	struct container_run r = { .engine = "/usr/bin/podman",
				   .ref = CONTAINER_IMAGE_REPO ":abc", .name = "dtctl-j.0.r1-12345678",
				   .shared_dir = "/shared", .user = &u,
				   .env_file = "/root/.dtctl/ctr-env/j.0.r1.12345678.env" };
	struct strvec out = STRVEC_INIT, set = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT;

	run_argv(&r, &out, &set, &notes);
	assert_true(has(&out, "--user=1001:1001"));
	assert_true(has(&out, "--group-add=27") && has(&out, "--group-add=100"));
	assert_false(has(&out, "--group-add=1001"));        /* the primary one is --user's */
	assert_true(has(&out, "--cap-drop=all") && has(&out, "--security-opt=no-new-privileges"));
	assert_true(has(&out, "--env-file=/root/.dtctl/ctr-env/j.0.r1.12345678.env"));
	assert_false(has(&out, "--env=RANK"));              /* not from root's podman's env */
	strvec_clear(&out);
	/* line_buffered: the node's library in the image, first in LD_PRELOAD */
	r.user = NULL;
	r.env_file = NULL;
	r.stdbuf_lib = "/usr/libexec/coreutils/libstdbuf.so";
	r.ld_preload = CONTAINER_STDBUF ":/opt/mine.so";
	run_argv(&r, &out, &set, &notes);
	assert_true(has(&out, "--volume=/usr/libexec/coreutils/libstdbuf.so:" CONTAINER_STDBUF ":ro"));
	assert_true(has(&out, "--env=LD_PRELOAD=" CONTAINER_STDBUF ":/opt/mine.so"));
	assert_true(has(&out, "--env=_STDBUF_O=L") && has(&out, "--env=RANK"));
	assert_false(has(&out, "--cap-drop=all"));
	strvec_clear(&out);
	strbuf_release(&notes);
}

static void test_gpus(void **state)
{
	char dir[] = "/tmp/dt-cdi-XXXXXX", path[64];
	struct container_run r = { .engine = "podman", .ref = "img", .name = "n",
				   .gpus = "2,3", .dev_dir = "/nonexistent-dev" };
	struct strvec out = STRVEC_INIT, set = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT;
	FILE *f;

	/* fake GPUs: no device nodes, none passed, and the log is told */
	assert_non_null(mkdtemp(dir));
	r.cdi_dir = dir;
	run_argv(&r, &out, &set, &notes);
	for (size_t i = 0; i < out.nr; i++)
		assert_null(strstr(out.v[i], "--device"));
	assert_non_null(strstr(notes.buf, "2 of the task's GPUs (2,3) have no device node"));
	assert_int_equal(set.nr, 0);
	strvec_clear(&out);
	strbuf_reset(&notes);
	/* an NVIDIA CDI spec: the task's GPUs by CDI name, renumbered from 0 inside */
	snprintf(path, sizeof(path), "%s/nvidia.yaml", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("cdiVersion: 0.5.0\n", f);
	fclose(f);
	run_argv(&r, &out, &set, &notes);
	assert_true(has(&out, "--device=nvidia.com/gpu=2"));
	assert_true(has(&out, "--device=nvidia.com/gpu=3"));
	assert_true(has(&set, "CUDA_VISIBLE_DEVICES=0,1"));
	assert_int_equal(notes.len, 0);
	unlink(path);
	rmdir(dir);
	strvec_clear(&out);
	strvec_clear(&set);
	strbuf_release(&notes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_argv),
		cmocka_unit_test(test_gpus),
		cmocka_unit_test(test_team_user),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
