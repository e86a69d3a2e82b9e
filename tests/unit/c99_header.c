/* Compiled as C99 with -pedantic -Werror: the public header must be plain, warning-free C. */
#include <bagua/bagua.h>
#include <stdio.h>

int main(void) {
  bagua_config_t config = BAGUA_CONFIG_INITIALIZER;
  bagua_unique_id_t id;
  bagua_comm_t comm = NULL;
  (void)id;
  if (config.size != sizeof(bagua_config_t) || config.magic != BAGUA_CONFIG_MAGIC) return 1;
  if (bagua_get_version() != BAGUA_VERSION_CODE) return 1;
  if (bagua_comm_rank(comm, NULL) != BAGUA_ERR_INVALID_ARGUMENT) return 1;
  printf("%s: %s\n", bagua_status_string(BAGUA_ERR_INVALID_ARGUMENT), bagua_get_last_error(NULL));
  return 0;
}
