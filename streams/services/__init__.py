"""Operations shared by the CLI and the admin API: one function per thing a user can do."""
