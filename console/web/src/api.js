// The console's JSON API: reads, and state changes that carry the session's CSRF token (security.py).
let csrfToken = null;

export class ApiError extends Error {
  constructor(message, body = {}, status = 0) {
    super(message);
    this.body = body;
    this.status = status;
  }
}

async function answer(response) {
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw new ApiError(body.error || `HTTP ${response.status}`, body, response.status);
  return body;
}

export async function startSession() {
  csrfToken = (await getJson("/api/session")).csrf_token;
}

export async function getJson(path) {
  return answer(await fetch(path, { headers: { Accept: "application/json" } }));
}

export async function postJson(path, body) {
  return answer(await fetch(path, {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrfToken },
  }));
}

export async function postForm(path, form) {
  return answer(await fetch(path, { method: "POST", body: form, headers: { "X-CSRF-Token": csrfToken } }));
}
