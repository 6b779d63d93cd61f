/*
 * ssh-dl.h - libssh2 and the few libcrypto calls of ssh.c, knownhosts.c and userkey.c,
 * loaded with dlopen() on first use instead of linked.
 *
 * Why: every dtctl, dtagent and dtsched process mapped and relocated libssh2
 * and libcrypto at start, 1.6 ms of CPU of the 3 ms a `dtctl run --detach`
 * cost (docs/BENCHMARKS.md, "submit rate"), though only the SSH commands (init,
 * exec, push, doctor) use them.  Request signing has its own SHA-256 (sha256.h).
 *
 * How: the two files include this header after all others (it includes
 * libssh2's and OpenSSL's); each name below becomes a call through dt_ssh_lib()'s table, typed from
 * the library's own declaration (__typeof__), so the call sites stay as
 * written.  dt_ssh_lib() loads both libraries once (thread-safe) and dies
 * with the library's name when one is missing: the same failure ld.so would
 * have reported at start for a linked library, now only for the commands that
 * need it.
 */
#ifndef DT_SSH_DL_H
#define DT_SSH_DL_H

#include <libssh2.h>
#include <libssh2_sftp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define DT_SSH2_FUNCS(X) \
	X(libssh2_agent_connect) X(libssh2_agent_disconnect) X(libssh2_agent_free) \
	X(libssh2_agent_get_identity) X(libssh2_agent_init) X(libssh2_agent_list_identities) \
	X(libssh2_agent_userauth) X(libssh2_channel_close) X(libssh2_channel_eof) \
	X(libssh2_channel_free) X(libssh2_channel_get_exit_signal) \
	X(libssh2_channel_get_exit_status) X(libssh2_channel_open_ex) \
	X(libssh2_channel_process_startup) X(libssh2_channel_read_ex) \
	X(libssh2_channel_wait_closed) X(libssh2_free) X(libssh2_init) \
	X(libssh2_session_block_directions) X(libssh2_session_callback_set) \
	X(libssh2_session_disconnect_ex) \
	X(libssh2_session_free) X(libssh2_session_handshake) X(libssh2_session_hostkey) \
	X(libssh2_session_init_ex) X(libssh2_session_last_errno) X(libssh2_session_last_error) \
	X(libssh2_session_method_pref) X(libssh2_session_set_blocking) \
	X(libssh2_session_set_timeout) X(libssh2_session_supported_algs) \
	X(libssh2_sftp_close_handle) X(libssh2_sftp_init) X(libssh2_sftp_last_error) \
	X(libssh2_sftp_open_ex) X(libssh2_sftp_read) X(libssh2_sftp_shutdown) \
	X(libssh2_sftp_unlink_ex) X(libssh2_sftp_write) X(libssh2_userauth_authenticated) \
	X(libssh2_userauth_keyboard_interactive_ex) X(libssh2_userauth_list) \
	X(libssh2_userauth_password_ex) X(libssh2_userauth_publickey_fromfile_ex)

#define DT_CRYPTO_FUNCS(X) X(EVP_DecodeBlock) X(EVP_EncodeBlock) X(EVP_sha1) X(HMAC) \
	X(EVP_PKEY_new_raw_private_key) X(EVP_PKEY_new_raw_public_key) X(EVP_PKEY_free) \
	X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_DigestSignInit) X(EVP_DigestSign) \
	X(EVP_DigestVerifyInit) X(EVP_DigestVerify) X(EVP_PKEY_get_raw_public_key)

#define DT_SSH_DL_FIELD(f) __typeof__(f) *f;
struct dt_ssh_lib {
	DT_SSH2_FUNCS(DT_SSH_DL_FIELD)
	DT_CRYPTO_FUNCS(DT_SSH_DL_FIELD)
};
#undef DT_SSH_DL_FIELD

/* the loaded table; dies if libssh2 or libcrypto cannot be loaded */
const struct dt_ssh_lib *dt_ssh_lib(void);

#ifndef DT_SSH_DL_IMPL
#define libssh2_agent_connect (dt_ssh_lib()->libssh2_agent_connect)
#define libssh2_agent_disconnect (dt_ssh_lib()->libssh2_agent_disconnect)
#define libssh2_agent_free (dt_ssh_lib()->libssh2_agent_free)
#define libssh2_agent_get_identity (dt_ssh_lib()->libssh2_agent_get_identity)
#define libssh2_agent_init (dt_ssh_lib()->libssh2_agent_init)
#define libssh2_agent_list_identities (dt_ssh_lib()->libssh2_agent_list_identities)
#define libssh2_agent_userauth (dt_ssh_lib()->libssh2_agent_userauth)
#define libssh2_channel_close (dt_ssh_lib()->libssh2_channel_close)
#define libssh2_channel_eof (dt_ssh_lib()->libssh2_channel_eof)
#define libssh2_channel_free (dt_ssh_lib()->libssh2_channel_free)
#define libssh2_channel_get_exit_signal (dt_ssh_lib()->libssh2_channel_get_exit_signal)
#define libssh2_channel_get_exit_status (dt_ssh_lib()->libssh2_channel_get_exit_status)
#define libssh2_channel_open_ex (dt_ssh_lib()->libssh2_channel_open_ex)
#define libssh2_channel_process_startup (dt_ssh_lib()->libssh2_channel_process_startup)
#define libssh2_channel_read_ex (dt_ssh_lib()->libssh2_channel_read_ex)
#define libssh2_channel_wait_closed (dt_ssh_lib()->libssh2_channel_wait_closed)
#define libssh2_free (dt_ssh_lib()->libssh2_free)
#define libssh2_init (dt_ssh_lib()->libssh2_init)
#define libssh2_session_block_directions (dt_ssh_lib()->libssh2_session_block_directions)
#define libssh2_session_callback_set (dt_ssh_lib()->libssh2_session_callback_set)
#define libssh2_session_disconnect_ex (dt_ssh_lib()->libssh2_session_disconnect_ex)
#define libssh2_session_free (dt_ssh_lib()->libssh2_session_free)
#define libssh2_session_handshake (dt_ssh_lib()->libssh2_session_handshake)
#define libssh2_session_hostkey (dt_ssh_lib()->libssh2_session_hostkey)
#define libssh2_session_init_ex (dt_ssh_lib()->libssh2_session_init_ex)
#define libssh2_session_last_errno (dt_ssh_lib()->libssh2_session_last_errno)
#define libssh2_session_last_error (dt_ssh_lib()->libssh2_session_last_error)
#define libssh2_session_method_pref (dt_ssh_lib()->libssh2_session_method_pref)
#define libssh2_session_set_blocking (dt_ssh_lib()->libssh2_session_set_blocking)
#define libssh2_session_set_timeout (dt_ssh_lib()->libssh2_session_set_timeout)
#define libssh2_session_supported_algs (dt_ssh_lib()->libssh2_session_supported_algs)
#define libssh2_sftp_close_handle (dt_ssh_lib()->libssh2_sftp_close_handle)
#define libssh2_sftp_init (dt_ssh_lib()->libssh2_sftp_init)
#define libssh2_sftp_last_error (dt_ssh_lib()->libssh2_sftp_last_error)
#define libssh2_sftp_open_ex (dt_ssh_lib()->libssh2_sftp_open_ex)
#define libssh2_sftp_read (dt_ssh_lib()->libssh2_sftp_read)
#define libssh2_sftp_shutdown (dt_ssh_lib()->libssh2_sftp_shutdown)
#define libssh2_sftp_unlink_ex (dt_ssh_lib()->libssh2_sftp_unlink_ex)
#define libssh2_sftp_write (dt_ssh_lib()->libssh2_sftp_write)
#define libssh2_userauth_authenticated (dt_ssh_lib()->libssh2_userauth_authenticated)
#define libssh2_userauth_keyboard_interactive_ex (dt_ssh_lib()->libssh2_userauth_keyboard_interactive_ex)
#define libssh2_userauth_list (dt_ssh_lib()->libssh2_userauth_list)
#define libssh2_userauth_password_ex (dt_ssh_lib()->libssh2_userauth_password_ex)
#define libssh2_userauth_publickey_fromfile_ex (dt_ssh_lib()->libssh2_userauth_publickey_fromfile_ex)
#define EVP_DecodeBlock (dt_ssh_lib()->EVP_DecodeBlock)
#define EVP_EncodeBlock (dt_ssh_lib()->EVP_EncodeBlock)
#define EVP_sha1 (dt_ssh_lib()->EVP_sha1)
#define HMAC (dt_ssh_lib()->HMAC)
/* users' ed25519 keys (userkey.c) */
#define EVP_PKEY_new_raw_private_key (dt_ssh_lib()->EVP_PKEY_new_raw_private_key)
#define EVP_PKEY_new_raw_public_key (dt_ssh_lib()->EVP_PKEY_new_raw_public_key)
#define EVP_PKEY_free (dt_ssh_lib()->EVP_PKEY_free)
#define EVP_MD_CTX_new (dt_ssh_lib()->EVP_MD_CTX_new)
#define EVP_MD_CTX_free (dt_ssh_lib()->EVP_MD_CTX_free)
#define EVP_DigestSignInit (dt_ssh_lib()->EVP_DigestSignInit)
#define EVP_DigestSign (dt_ssh_lib()->EVP_DigestSign)
#define EVP_DigestVerifyInit (dt_ssh_lib()->EVP_DigestVerifyInit)
#define EVP_DigestVerify (dt_ssh_lib()->EVP_DigestVerify)
#define EVP_PKEY_get_raw_public_key (dt_ssh_lib()->EVP_PKEY_get_raw_public_key)
#endif

#endif
