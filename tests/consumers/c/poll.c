/*
 * A C program outside libwool's source tree: built against an installed libwool (pkg-config
 * or CMake), it polls one worker and prints the reading. `poll TARGET`; exit 0 on success.
 */
#include <wool.h>

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: poll TARGET\n");
        return 2;
    }
    printf("built against libwool %s (%d), running against %s\n", WOOL_VERSION_STRING,
           WOOL_VERSION_NUMBER, wool_version());
    wool_connection *conn = NULL;
    double idle = -1.0;
    wool_status status = wool_connect(argv[1], NULL, &conn);
    if (status == WOOL_STATUS_OK) status = wool_idle(conn, 5.0, &idle);
    if (status != WOOL_STATUS_OK) {
        char message[256];
        wool_last_error(message, sizeof message);
        fprintf(stderr, "%s: %s\n", wool_status_name(status), message);
        wool_free(conn);
        return 1;
    }
    printf("worker %s idle %.3f s\n", argv[1], idle);
    wool_free(conn);
    return 0;
}
