/*
 * httpc.c - signed requests with libcurl (see httpc.h).
 */
#include "httpc.h"
#include "json.h"
#include "protocol.h"
#include "usage.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_setup(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void dt_httpc_init(struct dt_httpc *c, const char *host, int port, const struct dt_auth_key *key)
{
	memset(c, 0, sizeof(*c));
	c->host = xstrdup(host);
	c->port = port;
	if (key)
		c->key = *key;
	c->timeout_ms = 10000;
	c->connect_timeout_ms = 3000;
}

void dt_httpc_release(struct dt_httpc *c)
{
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c->host);
	memset(c, 0, sizeof(*c));
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *data)
{
	struct strbuf *sb = data;

	if (sb->len + size * nmemb > 64 * 1024 * 1024)
		return 0;   /* refuse absurd replies */
	strbuf_add(sb, ptr, size * nmemb);
	return size * nmemb;
}

int dt_httpc_request_raw(struct dt_httpc *c, const char *method, const char *path,
			 const char *body, size_t len, struct strbuf *reply, struct strbuf *err)
{
	char ts[DT_TS_LEN], nonce[DT_NONCE_HEX], sig[DT_SHA256_HEX];
	struct strbuf url = STRBUF_INIT, h = STRBUF_INIT;
	struct curl_slist *hdrs = NULL;
	CURLcode rc;
	long status = 0;
	CURL *curl;

	pthread_once(&curl_once, curl_setup);
	if (!c->curl)
		c->curl = curl_easy_init();
	curl = c->curl;
	if (!curl) {
		strbuf_addf(err, "cannot create an HTTP client for %s:%d", c->host, c->port);
		return -1;
	}
	if (dt_auth_sign_request(&c->key, method, path, body, body ? len : 0, ts, nonce, sig) < 0) {
		strbuf_addf(err, "cannot sign a request to %s:%d", c->host, c->port);
		return -1;
	}
	strbuf_addf(&url, "http://%s:%d%s", c->host, c->port, path);
	strbuf_addf(&h, "%s: %s", DT_HDR_TIMESTAMP, ts);
	hdrs = curl_slist_append(hdrs, h.buf);
	strbuf_reset(&h);
	strbuf_addf(&h, "%s: %s", DT_HDR_NONCE, nonce);
	hdrs = curl_slist_append(hdrs, h.buf);
	strbuf_reset(&h);
	strbuf_addf(&h, "%s: %s", DT_HDR_SIGNATURE, sig);
	hdrs = curl_slist_append(hdrs, h.buf);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");

	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url.buf);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, reply);
	curl_easy_setopt(curl, CURLOPT_PROXY, "");   /* never through $http_proxy */
	if (body) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	} else if (!strcmp(method, "GET")) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	}
	rc = curl_easy_perform(curl);
	curl_slist_free_all(hdrs);
	strbuf_release(&url);
	strbuf_release(&h);
	if (rc != CURLE_OK) {
		if (rc == CURLE_OPERATION_TIMEDOUT)
			strbuf_addf(err, "no answer from %s:%d within %ld ms", c->host, c->port,
				    c->timeout_ms);
		else
			strbuf_addf(err, "cannot reach %s:%d: %s", c->host, c->port,
				    curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	return (int)status;
}

int dt_httpc_request(struct dt_httpc *c, const char *method, const char *path,
		     const json_t *body, json_t **reply, struct strbuf *err)
{
	struct strbuf in = STRBUF_INIT, out = STRBUF_INIT;
	int status;

	if (reply)
		*reply = NULL;
	if (body)
		json_append(&in, body);
	status = dt_httpc_request_raw(c, method, path, body ? in.buf : NULL, in.len, &out, err);
	if (status > 0 && reply && out.len) {
		*reply = json_parse(out.buf, out.len, NULL);
		if (*reply && !json_is_object(*reply)) {
			json_decref(*reply);
			*reply = NULL;
		}
	}
	strbuf_release(&in);
	strbuf_release(&out);
	return status;
}

const char *dt_httpc_reply_error(const json_t *reply, int status)
{
	const char *e = json_get_str(reply, "error", NULL);

	if (e)
		return e;
	switch (status) {
	case 401: return "unauthorized";
	case 404: return "not found";
	case 413: return "request too large";
	default: return status >= 500 ? "server error" : "request refused";
	}
}
