"""The console's forms in a real browser (Playwright driving Debian's Chromium) against `trolly-node dev` and a
password-protected keyring: a file that is not a dataset refused beside the file with what to fix, a table with
an id, a word column and missing cells packed with what was done per column and the live cost shown, a wrong
password that says so and submits nothing, a submission that the task page then follows, the task page's score
beside a baseline (a console run in this process, handed a LogisticRegression to fit it), requests without the CSRF token or from another Origin refused (403) with nothing changed, and the
wallet's preview, cancel and confirmation, a second key's delegation (with the password) seen on the Wallet page
and in the validator's delegator count on the Network page, the preflight on the Provide compute page, and a label on every
control of every page. Screenshots go to `test-artifacts/console/`."""

from __future__ import annotations

import concurrent.futures
import contextlib

import pytest

from console_helpers import (ARTIFACTS, DEV_ADDRESS, PASSWORD, PageProblems, browser_page, chain_query,
                             console_process, console_thread, file_keyring, logistic_baseline, page_problems,
                             skip_without_a_browser)
from dev_node import dev_node, send_included
from requester_helpers import PEOPLE_HEADER, people_table, write_csv
from trolly.chain.crypto import encode_address
from trolly.chain.hd import COIN_TYPE, DEV_MNEMONIC, dev_key
from trolly.console.config import ConsoleConfig
from trolly.wallet.keyring import WEAKEST_ACCEPTED, Keyring
from trolly.wallet.passwords import PasswordSource
from trolly.wallet.txbuilder import send_message

pytestmark = pytest.mark.slow

SYNC_API = skip_without_a_browser()
expect = SYNC_API.expect
OTHER = encode_address(bytes(range(40, 60)))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-forms")
    home = file_keyring(tmp / "home")
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(dev_node(tmp / "node"))
        served = stack.enter_context(console_process(node, tmp / "console.log", 30.0, home))
        yield served.url, node, tmp, served.address


@pytest.fixture(scope="module")
def page(site):
    with browser_page(SYNC_API, site[3]) as page:  # opened through the address the console printed
        yield page


@pytest.fixture(autouse=True)
def no_page_errors(page):
    """Each test's pages load and run with no error in the browser's console and no failed request."""
    yield
    page_problems(page).check()


def tasks(node: str) -> list:
    return chain_query(node, "/market/tasks")["tasks"]


def balance(node: str, address: str) -> int:
    return int((chain_query(node, f"/account/{address}") or {}).get("balance", 0))


def open_new_task(page, url: str) -> None:
    page.goto(f"{url}/#/new-task")
    page.wait_for_selector('main[data-loaded="#/new-task"]', timeout=15_000)


def test_a_file_that_is_not_a_dataset_is_refused_beside_the_file_with_what_to_fix(site, page):
    url, rpc, tmp, _ = site
    open_new_task(page, url)
    page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)").set_input_files(
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"just some notes"})
    page.get_by_role("button", name="Upload and pack").click()
    error = page.locator("#file-error")
    expect(error).to_be_visible(timeout=60_000)  # the console's first upload loads the packing code (torch)
    expect(error).to_contain_text("upload a .csv file with a header row")
    file_field = page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)")
    assert file_field.get_attribute("aria-invalid") == "true"
    page.screenshot(path=str(ARTIFACTS / "upload-refused.png"), full_page=True)

    page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)").set_input_files(
        {"name": "one.csv", "mimeType": "text/csv", "buffer": b"a,b,label\n1,2,x\n3,4,x\n5,6,x\n"})
    page.get_by_role("button", name="Upload and pack").click()
    expect(error).to_contain_text("at least two labels")
    page_problems(page).check(expected=(r"/api/new-task/upload answered 400$",))  # the two refusals, and only them


def test_markup_in_a_file_is_shown_as_text_never_run(site, page):
    url, node, tmp, _ = site
    open_new_task(page, url)
    hostile = '<img src=x onerror="window.pwned=1">'
    rows = "".join(f"{i},{i % 2},{hostile if i % 2 else 'plain'}\n" for i in range(12))
    page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)").set_input_files(
        {"name": "hostile.csv", "mimeType": "text/csv", "buffer": f"a,b,label\n{rows}".encode()})
    page.get_by_role("button", name="Upload and pack").click()
    expect(page.locator("#pack-summary")).to_contain_text(hostile)  # the label, shown as the text it is
    assert page.evaluate("window.pwned === undefined") and page.locator("#pack-summary img").count() == 0


def upload_people_table(page, tmp) -> None:
    """The New task page given a table as people have them (an id, an amount, a word column, missing cells),
    packed for the digits MLP; its column report checked row by row."""
    page.get_by_label("Digits MLP (tables and text)").check()
    page.get_by_label("Data file (.csv, .jsonl, or .zip of class folders)").set_input_files(
        str(write_csv(tmp / "people.csv", people_table(), PEOPLE_HEADER)))
    page.get_by_role("button", name="Upload and pack").click()
    expect(page.locator("#pack-summary")).to_contain_text("basic, premium", timeout=60_000)  # torch loads first
    report = page.get_by_role("table", name="What packing did per column")
    expect(report).to_be_visible()
    expect(page.locator("#pack-summary")).to_contain_text("2 missing cells filled")
    rows = {row.locator("td").first.inner_text(): row.locator("td").all_inner_texts()
            for row in report.locator("tbody tr").all()}
    assert rows.keys() == {"customer_id", "spend", "city"}, rows
    assert rows["spend"][1] == "numeric" and rows["spend"][2].startswith("standardized (mean")
    assert rows["spend"][4].startswith("1 (with the median")
    assert rows["city"][2] == "one-hot over 3 categories seen in training" and rows["city"][3] == "3"
    assert rows["city"][4].startswith("1 (with the most frequent")
    assert rows["customer_id"][1] == "left out" and "unique per row, like an id" in rows["customer_id"][2]


def test_a_table_with_words_and_gaps_shows_its_columns_the_live_cost_and_submits_with_the_right_password(site, page):
    url, rpc, tmp, _ = site
    open_new_task(page, url)
    upload_people_table(page, tmp)
    page.screenshot(path=str(ARTIFACTS / "new-task-columns.png"), full_page=True)
    cost = page.locator("#cost")
    expect(cost).to_contain_text("reward per round")
    first = cost.get_attribute("data-cost")
    page.get_by_label("Budget (what you escrow; the unspent part is refunded)").fill("20trl")
    # The live cost is recomputed on every change (the upload's own answer may land after the budget's): wait
    # for the budget's, not for any change.
    page.wait_for_function("() => Number(document.getElementById('cost').dataset.cost) <= 20000000")
    assert int(cost.get_attribute("data-cost")) <= 20_000_000 < int(first)
    page.get_by_label("Budget (what you escrow; the unspent part is refunded)").fill("twenty")
    expect(page.locator("#budget-error")).to_contain_text("invalid budget")
    page_problems(page).check(expected=(r"/api/new-task/plan\?\S*budget=twenty\S* answered 400$",))
    expect(page.get_by_role("button", name="Sign and submit the task")).to_be_disabled()  # nothing to sign
    page.get_by_label("Budget (what you escrow; the unspent part is refunded)").fill("20trl")
    expect(cost).to_contain_text("reward per round")
    review = page.locator("#review")  # the task summed up beside the password, before signing
    expect(review).to_contain_text("Digits MLP (tables and text)")
    expect(review).to_contain_text("20 TRL")
    expect(page.get_by_role("button", name="Sign and submit the task")).to_be_enabled()

    before, funds = tasks(rpc), balance(rpc, DEV_ADDRESS)
    page.get_by_label("Keyring password (used once to sign, never stored)").fill("not the password")
    page.get_by_role("button", name="Sign and submit the task").click()
    expect(page.locator("#password-error")).to_contain_text("wrong keyring password")
    page_problems(page).check(expected=(r"/api/new-task/submit answered 400$",))
    assert tasks(rpc) == before and balance(rpc, DEV_ADDRESS) == funds
    page.screenshot(path=str(ARTIFACTS / "wrong-password.png"), full_page=True)

    page.get_by_label("Keyring password (used once to sign, never stored)").fill(PASSWORD)
    page.get_by_role("button", name="Sign and submit the task").click()
    result = page.locator("#submit-result")
    expect(result).to_contain_text("submitted in block", timeout=30_000)
    task_id = int(result.get_attribute("data-task-id"))
    assert [t["id"] for t in tasks(rpc)] == [t["id"] for t in before] + [task_id]
    assert page.get_by_label("Keyring password (used once to sign, never stored)").input_value() == ""
    page.screenshot(path=str(ARTIFACTS / "new-task.png"), full_page=True)
    page.get_by_role("link", name=f"Follow task {task_id}").click()
    page.wait_for_selector(f'main[data-loaded="#/tasks/{task_id}"]', timeout=15_000)
    expect(page.get_by_role("heading", name=f"Task {task_id}", exact=True)).to_be_visible()
    expect(page.locator("#chart-progress")).to_contain_text("waiting for the first verified round")


def test_a_request_without_the_csrf_token_or_from_another_origin_is_refused_and_changes_nothing(site, page):
    url, rpc, tmp, _ = site
    open_new_task(page, url)
    token = page.evaluate("fetch('/api/session').then(r => r.json()).then(b => b.csrf_token)")
    send = {"action": "send", "key": "dev", "to": OTHER, "amount": "1trl", "password": PASSWORD, "confirmed": True}
    before, funds = tasks(rpc), balance(rpc, OTHER)
    no_token = page.request.post(f"{url}/api/wallet/sign", data=send, headers={"Origin": url})
    other_origin = page.request.post(f"{url}/api/wallet/sign", data=send,
                                     headers={"Origin": "http://evil.example", "X-CSRF-Token": token})
    assert (no_token.status, other_origin.status) == (403, 403)
    assert "CSRF" in no_token.json()["error"] and "evil.example" in other_origin.json()["error"]
    # A page of another origin posting to the console, as a malicious site would: refused, nothing changes.
    page.goto("data:text/html,<p>another site</p>")
    page.evaluate("""([url, body]) => fetch(url + '/api/wallet/sign', {method: 'POST', mode: 'no-cors',
        credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)})
        .catch(() => null)""", [url, send])
    page.wait_for_timeout(1500)
    assert tasks(rpc) == before and balance(rpc, OTHER) == funds == 0
    page_problems(page).check(expected=(r"^console error: Access to fetch .* blocked by CORS policy",
                                        r"/api/wallet/sign failed: net::ERR_FAILED$"))  # the other site's refusal


def test_the_wallet_previews_cancels_and_sends_after_confirmation_with_the_password(site, page):
    url, rpc, tmp, _ = site
    page.goto(f"{url}/#/wallet")
    page.wait_for_selector('main[data-loaded="#/wallet"]', timeout=15_000)
    expect(page.get_by_role("table", name="Balances").get_by_text(DEV_ADDRESS)).to_be_visible()
    page.get_by_label("Recipient (an address or a key name)").fill(OTHER)
    page.get_by_label("Amount").fill("2.5trl")
    page.get_by_role("button", name="Review").click()
    review = page.locator("#review")
    expect(review).to_contain_text("Confirm this transaction")
    expect(review).to_contain_text("2.5 TRL")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#wallet-outcome")).to_contain_text("nothing was signed")
    assert balance(rpc, OTHER) == 0

    page.get_by_role("button", name="Review").click()
    page.get_by_label("Keyring password (used once to sign, never stored)").fill("wrong")
    page.get_by_role("button", name="Sign and broadcast").click()
    expect(page.locator("#wallet-password-error")).to_contain_text("wrong keyring password")
    page_problems(page).check(expected=(r"/api/wallet/sign answered 400$",))
    assert balance(rpc, OTHER) == 0
    page.get_by_label("Keyring password (used once to sign, never stored)").fill(PASSWORD)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # "Sign and broadcast", by keyboard
    expect(page.locator("#wallet-outcome")).to_contain_text("Included in block", timeout=30_000)
    assert balance(rpc, OTHER) == 2_500_000
    page.screenshot(path=str(ARTIFACTS / "wallet.png"), full_page=True)


def test_a_second_key_delegates_with_the_password_and_the_validator_counts_it(site, page):
    """A key added to the keyring (funded by the dev key) delegates through the Wallet page's preview and password;
    its delegation shows on the Wallet page and the validator's delegator count goes up on the Network page."""
    url, node, tmp, _ = site
    Keyring(tmp / "home", "file", PasswordSource.fixed(PASSWORD), WEAKEST_ACCEPTED).recover(
        "friend", DEV_MNEMONIC, f"m/44'/{COIN_TYPE}'/0'/0'/1'")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's event loop runs in this thread
        pool.submit(send_included, node, dev_key(0), send_message(dev_key(1).address, 10_000_000)).result()
    validators = page.get_by_role("table", name="Validators")
    page.goto(f"{url}/#/network")
    page.wait_for_selector('main[data-loaded="#/network"]', timeout=15_000)
    expect(validators.locator("tbody tr").first.locator("td").nth(5)).to_have_text("1")
    expect(validators).to_contain_text("not jailed")

    page.goto(f"{url}/#/wallet")
    page.wait_for_selector('main[data-loaded="#/wallet"]', timeout=15_000)
    page.get_by_label("Action", exact=True).select_option("delegate")
    page.get_by_label("Key that signs").select_option("friend")
    expect(page.get_by_label("Validator", exact=True)).to_have_value(DEV_ADDRESS)
    page.get_by_label("Amount").fill("4trl")
    page.get_by_role("button", name="Review").click()
    expect(page.locator("#review")).to_contain_text("MsgDelegate")
    page.get_by_label("Keyring password (used once to sign, never stored)").fill(PASSWORD)
    page.get_by_role("button", name="Sign and broadcast").click()
    expect(page.locator("#wallet-outcome")).to_contain_text("Included in block", timeout=30_000)
    expect(page.get_by_role("table", name="Delegations")).to_contain_text("4 TRL")
    assert chain_query(node, f"/delegations/{encode_address(dev_key(1).address)}")["total"] == 4_000_000

    page.goto(f"{url}/#/network")
    page.wait_for_selector('main[data-loaded="#/network"]', timeout=15_000)
    expect(validators.locator("tbody tr").first.locator("td").nth(5)).to_have_text("2")
    page.screenshot(path=str(ARTIFACTS / "network-delegators.png"), full_page=True)


def test_the_provide_compute_page_runs_the_preflight(site, page):
    url, node, tmp, _ = site
    page.goto(f"{url}/#/compute")
    page.wait_for_selector('main[data-loaded="#/compute"]', timeout=15_000)
    expect(page.get_by_role("table", name="Keys").get_by_text(DEV_ADDRESS)).to_be_visible()
    expect(page.locator("#worker-status")).to_contain_text("not started")
    page.get_by_role("button", name="Run the preflight").click()
    expect(page.get_by_label("Preflight: what this machine can do")).to_contain_text("reference speed", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "compute.png"), full_page=True)


def test_the_console_opens_only_through_its_printed_address_and_then_hides_the_token(site, page):
    """A browser without the token (another user, another profile) gets 403 everywhere; the printed address opens
    a session in an HttpOnly cookie the page's scripts cannot read, and lands on the address without the token."""
    url, node, tmp, address = site
    page.goto(address)
    assert page.url == f"{url}/"  # where the printed address leads: no token in it
    assert page.evaluate("document.cookie") == ""  # the session cookie is HttpOnly
    elsewhere = page.context.browser.new_context()  # cookies of its own: another profile, another user
    try:
        stranger = elsewhere.new_page()
        refused = stranger.goto(f"{url}/#/wallet")
        assert refused.status == 403 and "open that address again" in stranger.content()
        assert stranger.request.get(f"{url}/api/session").status == 403
        opened = stranger.goto(address.replace("/?", "/?x=1&"))
        assert opened.status == 200 and stranger.url == f"{url}/?x=1"
        stranger.wait_for_selector('main[data-loaded="#/network"]', timeout=15_000)
    finally:
        elsewhere.close()


def test_the_private_box_says_what_stays_in_clear(site, page):
    """The Private box did not say that label and column names stay readable. Now it names what is not
    encrypted."""
    url, node, tmp, _ = site
    open_new_task(page, url)
    label = page.locator('label[for="private"]')
    expect(label).to_contain_text("Not encrypted: the label names, a CSV's column names")


def test_a_console_that_fits_baselines_shows_the_score_beside_one_on_the_task_page(site, page):
    """Issue 34: the task page shows the model's held-out score beside a baseline fitted on the same split and
    preprocessing. A console built with a fitting function (here scikit-learn's LogisticRegression, in this
    process: the requester library's own is chosen by a real console) gets a private table, submits it, and its
    task page shows the evaluated weights' accuracy beside the baseline's and their difference."""
    url, rpc, tmp, _ = site
    config = ConsoleConfig(rpc, tmp / "home")  # the forms console's keyring and nonces: one signer, one memory
    with console_thread(config, fit_baseline=logistic_baseline) as own:
        context = page.context.browser.new_context(viewport={"width": 1280, "height": 900})  # a session of its own
        try:
            tab = context.new_page()
            problems = PageProblems(tab)
            tab.goto(own.address)
            open_new_task(tab, own.url)
            upload_people_table(tab, tmp)
            expect(tab.locator("#cost")).to_contain_text("reward per round")
            tab.get_by_label("Keyring password (used once to sign, never stored)").fill(PASSWORD)
            tab.get_by_role("button", name="Sign and submit the task").click()
            result = tab.locator("#submit-result")
            expect(result).to_contain_text("submitted in block", timeout=30_000)
            task_id = int(result.get_attribute("data-task-id"))
            tab.get_by_role("link", name=f"Follow task {task_id}").click()
            section = tab.locator("#baseline")
            for _ in range(60):  # the chart job evaluates W_0 and fits the baseline, then a reload shows both
                tab.wait_for_selector(f'main[data-loaded="#/tasks/{task_id}"]', timeout=15_000)
                if section.count() and "W_0" in section.inner_text():
                    break
                tab.wait_for_timeout(500)
                tab.reload()
            chart = tab.evaluate(f"fetch('/api/tasks/{task_id}/chart').then((r) => r.json())")
            (initial,) = chart["points"]
            rows = section.get_by_role("table", name="Held-out accuracy: the model and the baseline").locator(
                "tbody tr")
            assert rows.nth(0).locator("td").all_inner_texts()[:2] == [
                "the latest evaluated weights (W_0)", f"{initial['accuracy']:.4f}"]
            assert rows.nth(1).locator("td").all_inner_texts()[:2] == [
                "baseline: logistic regression (scikit-learn)", f"{chart['baseline']['baseline']:.4f}"]
            assert "fitted on this computer" in rows.nth(1).inner_text()
            gap = initial["accuracy"] - chart["baseline"]["baseline"]
            expect(tab.locator("#baseline-gap")).to_contain_text(f"Model minus baseline: {gap:+.4f}")
            tab.screenshot(path=str(ARTIFACTS / "task-baseline.png"), full_page=True)
            problems.check()
        finally:
            context.close()


UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((control) => control.type !== 'hidden')
    .filter((control) => control.tagName === 'BUTTON' ? !control.innerText.trim()
        : !(control.labels && control.labels.length) && !control.getAttribute('aria-label'))
    .map((control) => control.outerHTML.slice(0, 120))"""


@pytest.mark.parametrize("hash_", ["#/network", "#/tasks", "#/new-task", "#/wallet", "#/compute"])
def test_every_control_has_a_label(site, page, hash_):
    url, node, tmp, _ = site
    page.goto(f"{url}/{hash_}")
    page.wait_for_selector(f'main[data-loaded="{hash_}"]', timeout=15_000)
    assert page.evaluate(UNLABELLED) == []
