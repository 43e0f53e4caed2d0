from mtsql.app.report.published import published_section


def test_the_papers_numbers_follow_the_datasets_the_run_evaluates():
    multi = "\n".join(published_section({"cosql", "sparc"}))
    single = "\n".join(published_section({"spider"}))
    assert "MTSQL-R1 paper (not this run)" in multi and "79.9" in multi and "the SQL-R1 paper" not in multi
    assert "SQL-R1 paper (not this run)" in single and "87.6" in single and "the MTSQL-R1 paper" not in single
    assert published_section(set()) == []
