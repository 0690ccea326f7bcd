"""The Governance pages in a real browser (Playwright driving Debian's Chromium) against `trolly-node dev` with short
gov periods in its genesis and a password-protected keyring holding the dev key (the only validator's operator):
a param-change proposal submitted, a vote refused by the chain while the proposal still takes deposits, the
deposit that starts its vote, a wrong password that signs nothing, votes that move the live tally, and at the end
of the voting period the status passed and the param's value now the proposed one, on the page and on the chain.
Screenshots go to `test-artifacts/console/`."""

from __future__ import annotations

import contextlib

import pytest

from console_helpers import (ARTIFACTS, PASSWORD, browser_page, chain_query, console_process, file_keyring,
                             page_problems, skip_without_a_browser)
from dev_node import dev_home_with_params, dev_node

pytestmark = pytest.mark.slow

SYNC_API = skip_without_a_browser()
expect = SYNC_API.expect
GOV = {"min_deposit": 2_000_000, "max_deposit_blocks": 900, "voting_period_blocks": 75}
"""A vote of 75 blocks (15 s at the node's 200 ms): time for a wrong password and two votes through the page."""
PASSWORD_LABEL = "Keyring password (used once to sign, never stored)"
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((control) => control.type !== 'hidden')
    .filter((control) => control.tagName === 'BUTTON' ? !control.innerText.trim()
        : !(control.labels && control.labels.length) && !control.getAttribute('aria-label'))
    .map((control) => control.outerHTML.slice(0, 120))"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-gov-browser")
    home = file_keyring(tmp / "home")
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(dev_node(dev_home_with_params(tmp / "node", {"gov": GOV})))
        served = stack.enter_context(console_process(node, tmp / "console.log", 30.0, home))
        yield served, node


@pytest.fixture(scope="module")
def page(site):
    with browser_page(SYNC_API, site[0].address) as page:
        yield page


def loaded(page, hash_: str) -> None:
    page.wait_for_selector(f'main[data-loaded="{hash_}"]', timeout=15_000)


def sign(page, password: str = PASSWORD) -> None:
    expect(page.locator("#gov-review")).to_contain_text("Confirm this transaction")
    page.get_by_label(PASSWORD_LABEL).fill(password)
    page.get_by_role("button", name="Sign and broadcast").click()


def included(page) -> None:
    expect(page.locator("#gov-outcome")).to_contain_text("Included in block", timeout=30_000)


TALLY_ROWS = {"Yes": 0, "No": 1, "Abstain": 2, "No with veto": 3}


def tally_row(page, label: str):
    return page.locator("#tally table tbody tr").nth(TALLY_ROWS[label])


def test_a_param_change_is_proposed_funded_voted_and_applied_through_the_pages(site, page):
    served, node = site
    page.goto(f"{served.url}/#/governance")
    loaded(page, "#/governance")
    assert page.evaluate(UNLABELLED) == []
    expect(page.locator("main")).to_contain_text("nobody has proposed anything yet")
    page.get_by_label("Title").fill("cheaper validators")
    page.get_by_label("Summary (optional)").fill("<b>raise</b> the validators' fee share")
    page.get_by_label("Changes, one SECTION.KEY=VALUE a line").fill("market.validator_fee_bps=300")
    page.get_by_label("First deposit").fill("1trl")
    page.get_by_role("button", name="Review").click()
    expect(page.locator("#gov-review")).to_contain_text(
        'submit the proposal "cheaper validators" (market.validator_fee_bps=300) with a first deposit of 1 TRL')
    sign(page)
    expect(page.locator("#gov-outcome")).to_contain_text("Proposal 1 submitted", timeout=30_000)
    row = page.get_by_role("table", name="Proposals").locator("tbody tr").first
    expect(row).to_contain_text("deposit period")
    expect(row).to_contain_text("1 TRL of 2 TRL")

    page.get_by_role("link", name="Open proposal 1").click()
    loaded(page, "#/governance/1")
    expect(page.locator("#proposal-summary")).to_have_text("<b>raise</b> the validators' fee share")  # text, not markup
    assert page.evaluate(UNLABELLED) == []
    page.get_by_label("Your vote").select_option("yes")
    page.get_by_role("button", name="Review vote").click()
    expect(page.locator("#gov-review")).to_contain_text("vote yes on proposal 1")
    sign(page)
    expect(page.locator("#gov-outcome")).to_contain_text("is not in its voting period", timeout=30_000)
    expect(page.locator("#gov-outcome")).to_contain_text("code 126 (gov)")
    page_problems(page).check(expected=(r"/api/gov/sign answered 400$",))  # the chain's refusal, and only it

    page.get_by_label("Amount to add").fill("1trl")
    page.get_by_role("button", name="Review deposit").click()
    expect(page.locator("#gov-review")).to_contain_text("deposit 1 TRL on proposal 1")
    sign(page)
    included(page)
    expect(page.locator("#proposal-state dd").first).to_have_text("voting period")
    expect(page.locator("#proposal-state")).to_contain_text("2 TRL of the minimum 2 TRL")

    page.get_by_label("Your vote").select_option("no")
    page.get_by_role("button", name="Review vote").click()
    sign(page, "wrong")
    expect(page.locator("#gov-review-password-error")).to_contain_text("wrong keyring password")
    page_problems(page).check(expected=(r"/api/gov/sign answered 400$",))
    page.get_by_label(PASSWORD_LABEL).fill(PASSWORD)
    page.get_by_role("button", name="Sign and broadcast").click()
    included(page)
    expect(tally_row(page, "No")).to_contain_text("100.0 %")
    expect(tally_row(page, "Yes")).to_contain_text("0 TRL")

    page.get_by_label("Your vote").select_option("yes")
    page.get_by_role("button", name="Review vote").click()
    sign(page)
    included(page)
    expect(tally_row(page, "Yes")).to_contain_text("100.0 %")  # the later vote replaced the earlier one
    expect(page.locator("#tally")).to_contain_text("passed")  # what it would decide if it ended now
    page.screenshot(path=str(ARTIFACTS / "governance-voting.png"), full_page=True)

    state = page.locator("#proposal-state")  # refreshed at every block: the vote ends without a reload
    expect(state.locator("dd").first).to_have_text("passed", timeout=90_000)
    expect(page.locator("#tally")).to_contain_text("Final tally")
    changes = page.get_by_role("table", name="Changes").locator("tbody tr").first
    assert changes.locator("td").all_inner_texts() == ["market.validator_fee_bps", "300", "300"]
    assert chain_query(node, "/params/market")["validator_fee_bps"] == 300
    page.screenshot(path=str(ARTIFACTS / "governance-passed.png"), full_page=True)

    page.goto(f"{served.url}/#/governance")
    loaded(page, "#/governance")
    row = page.get_by_role("table", name="Proposals").locator("tbody tr").first
    expect(row).to_contain_text("passed")
    page.screenshot(path=str(ARTIFACTS / "governance.png"), full_page=True)
