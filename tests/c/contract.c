/*
 * contract.c: include/wool.h declares exactly what docs/C-API.md says.
 *
 * Every prototype below is copied from the contract. C accepts a repeated declaration only
 * when it is compatible, so with -Werror this file compiles only if the header agrees: same
 * names, same parameter and return types. The enum values are checked at compile time and the
 * sizes at run time. Built and run by tests/integration/c_api.rs.
 */
#include "wool.h"

#include <stdio.h>

typedef enum wool_status wool_status_by_tag; /* the enum's tag exists, as in the contract */
typedef struct wool_connection wool_connection_by_tag;
typedef struct wool_credentials wool_credentials_by_tag;

wool_status wool_connect(const char *target, const wool_credentials *credentials,
                         wool_connection **out);
wool_status wool_idle(const wool_connection *conn, double timeout_seconds, double *out_seconds);
wool_status wool_stop(const wool_connection *conn, double grace_seconds, double timeout_seconds);
void wool_free(wool_connection *conn);
wool_status wool_credentials_from_pem(const char *ca_pem, const char *key_pem, const char *cert_pem,
                                      bool mutual, const char *identity, wool_credentials **out);
wool_status wool_credentials_from_files(const char *ca_path, const char *key_path,
                                        const char *cert_path, bool mutual, const char *identity,
                                        wool_credentials **out);
void wool_credentials_free(wool_credentials *credentials);
size_t wool_last_error(char *buf, size_t len);
int32_t wool_last_rpc_code(void);
const char *wool_status_name(wool_status status);
const char *wool_version(void);

_Static_assert(WOOL_STATUS_OK == 0, "WOOL_STATUS_OK");
_Static_assert(WOOL_STATUS_INVALID_ARGUMENT == 1, "WOOL_STATUS_INVALID_ARGUMENT");
_Static_assert(WOOL_STATUS_IDLE_UNAVAILABLE == 2, "WOOL_STATUS_IDLE_UNAVAILABLE");
_Static_assert(WOOL_STATUS_TRANSIENT == 3, "WOOL_STATUS_TRANSIENT");
_Static_assert(WOOL_STATUS_HANDSHAKE == 4, "WOOL_STATUS_HANDSHAKE");
_Static_assert(WOOL_STATUS_RPC_ERROR == 5, "WOOL_STATUS_RPC_ERROR");
_Static_assert(WOOL_STATUS_PANIC == 6, "WOOL_STATUS_PANIC");
/* The Rust side is a #[repr(C)] enum, which has the size of a C enum, that is of an int. */
_Static_assert(sizeof(wool_status) == sizeof(int), "wool_status has the size of a C enum");

int main(void) {
    /* Taking each function's address also proves the library defines every one of them. */
    void (*functions[])(void) = {
        (void (*)(void))wool_connect,
        (void (*)(void))wool_idle,
        (void (*)(void))wool_stop,
        (void (*)(void))wool_free,
        (void (*)(void))wool_credentials_from_pem,
        (void (*)(void))wool_credentials_from_files,
        (void (*)(void))wool_credentials_free,
        (void (*)(void))wool_last_error,
        (void (*)(void))wool_last_rpc_code,
        (void (*)(void))wool_status_name,
        (void (*)(void))wool_version,
    };
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
        if (functions[i] == NULL) {
            fprintf(stderr, "contract: function %zu is missing\n", i);
            return 1;
        }
    }
    printf("contract: header and library match C-API.md\n");
    return 0;
}
