"""How far the hardware profile travels: from `run_session` (bench/run/session.py), every call that passes the profile
(a value named `profile`, a `.profile` attribute, or a value built from one, such as a Plan or the run's context)
into a function defined in bench/ is followed depth-first in source order, each function once. Counted: the files
the path crosses, and the calls that enter a file the path had entered before and left. Read with `ast`; a method
call is followed where its name belongs to one function in bench/."""

import ast
from dataclasses import dataclass, field
from pathlib import Path

from bench.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"
START = ("bench.run.session", "run_session")
FILES_CEILING = 36
RETURNS_CEILING = 10
"""What the path crosses now; it may only fall. The goal is 15 files and 10 returns: the estimator, the speed model
and launch taking the resolved Plan's figures rather than passing it down through their helpers' modules."""
CARRIERS = ("profile", "plan")
"""A value named so is the profile or is resolved from it; so is an attribute of that name."""
PROFILE_FREE = ("cell", "workload", "backend", "init", "quant", "method")
"""A Plan's fields that the profile does not decide."""
RESOLVERS = ("plan_for", "Plan", "CellOnProfile")
"""Calls that resolve a cell on the profile: what they return carries it."""


@dataclass
class _Module:
    path: Path
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    """Local name -> dotted target (`bench.x.y` for a module or `bench.x:y` for a name in one)."""


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _read(root: Path) -> dict[str, _Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        module = _Module(path)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        module.functions[f"{node.name}.{item.name}"] = item
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = alias.name
        modules[_module_name(path, root)] = module
    return modules


class _Follower:
    def __init__(self, modules: dict[str, _Module]):
        self.modules = modules
        self.methods: dict[str, list[tuple[str, str]]] = {}
        for name, module in modules.items():
            for qual in module.functions:
                if "." in qual:
                    self.methods.setdefault(qual.split(".")[1], []).append((name, qual))
        self.seen: set[tuple[str, str]] = set()
        self.files: list[str] = []
        self.returns = 0
        self.types: dict[tuple[str, str], dict[str, str]] = {}
        self.holders = self._holders()

    def _holders(self) -> dict[tuple[str, str], set[str]]:
        """Each function's parameters that hold the profile: it reads their `.profile` (or `.plan`), or hands them
        (or an attribute of them, as `self.ctx`) whole to a parameter of another function that holds it; to a fixed
        point."""
        holders = {
            (m, q): _reads_profile_of(f) for m, module in self.modules.items() for q, f in module.functions.items()
        }
        calls = [
            (key, target, _passed(self.modules[target[0]].functions[target[1]], call))
            for key in holders
            for call in ast.walk(self.modules[key[0]].functions[key[1]])
            if isinstance(call, ast.Call) and (target := self.resolve(key, call.func, False)) is not None
        ]
        while True:
            before = sum(map(len, holders.values()))
            for key, target, passed in calls:
                holders[key] |= {r for p, a in passed if p in holders[target] and (r := _root(a)) is not None}
            if sum(map(len, holders.values())) == before:
                return holders

    def resolve(self, caller: tuple[str, str], func: ast.expr, receiver: bool) -> tuple[str, str] | None:
        """The (module, function) a call's callee names, if defined in bench/: a method by the class its receiver is
        annotated or built as, else by its name where one class defines it and the caller knows that class or calls
        it on the profile (`receiver`)."""
        module = caller[0]
        here = self.modules[module]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if caller not in self.types:
                self.types[caller] = _local_types(caller[1], here.functions[caller[1]])
            typed = self.types[caller].get(func.value.id)
            if typed is not None and (method := self._method(module, typed, func.attr)) is not None:
                return method
        if isinstance(func, ast.Name):
            if func.id in here.functions:
                return module, func.id
            return self._target(here.imports.get(func.id, ""), 0)
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id in here.imports:
                target = here.imports[func.value.id].replace(":", ".")
                if target in self.modules and func.attr in self.modules[target].functions:
                    return target, func.attr
            owners = self.methods.get(func.attr, [])
            known = here.functions.keys() | here.imports.keys()
            if len(owners) == 1 and (receiver or owners[0][1].split(".")[0] in known):
                return owners[0]
        return None

    def _method(self, module: str, cls: str, name: str) -> tuple[str, str] | None:
        if f"{cls}.{name}" in self.modules[module].functions:
            return module, f"{cls}.{name}"
        dotted = self.modules[module].imports.get(cls, "")
        if ":" in dotted and (owner := dotted.split(":")[0]) in self.modules:
            return self._method(owner, dotted.split(":")[1], name) if owner != module else None
        return None

    def _target(self, dotted: str, depth: int) -> tuple[str, str] | None:
        if ":" not in dotted or depth > 5:
            return None
        module, name = dotted.split(":")
        if module not in self.modules:
            return None
        if name in self.modules[module].functions:
            return module, name
        return self._target(self.modules[module].imports.get(name, ""), depth + 1)

    def follow(self, module: str, qual: str, tainted: set[str]) -> None:
        self.seen.add((module, qual))
        node = self.modules[module].functions[qual]
        tainted = _derived(node, tainted | {"profile"})
        for call in sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
        ):
            target = self.resolve((module, qual), call.func, _receives(call, tainted))
            if target is None or target in self.seen:
                continue
            bound = _bound(self.modules[target[0]].functions[target[1]], call, tainted, self.holders[target])
            if bound is None:
                continue
            if target[0] == module:
                self.follow(*target, bound)
                continue
            self.returns += target[0] in self.files
            self.files.append(target[0])
            self.follow(*target, bound)
            self.files.append(module)


def _carries(expr: ast.AST, tainted: set[str]) -> bool:
    """`expr` uses the profile: a tainted name (but not only a profile-free field of it, such as a Plan's cell), or
    an attribute named as a carrier."""
    free = {
        id(n.value)
        for n in ast.walk(expr)
        if isinstance(n, ast.Attribute) and n.attr in PROFILE_FREE and isinstance(n.value, ast.Name)
    }
    return any(
        (isinstance(n, ast.Name) and n.id in tainted and id(n) not in free)
        or (isinstance(n, ast.Attribute) and n.attr in CARRIERS)
        for n in ast.walk(expr)
    )


def _is_profile(expr: ast.AST, tainted: set[str]) -> bool:
    """`expr` is the profile or a resolution of it: a carrier name or attribute (or one read off it), or a Plan."""
    if isinstance(expr, ast.Call):
        name = expr.func.id if isinstance(expr.func, ast.Name) else getattr(expr.func, "attr", "")
        return name in RESOLVERS and any(_carries(a, tainted) for a in (*expr.args, *expr.keywords))
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute) and expr.attr in CARRIERS:
            return True
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in tainted


def _derived(node: ast.FunctionDef, tainted: set[str]) -> set[str]:
    """Names in `node` bound to the profile or a resolution of it, to a fixed point."""
    found = set(tainted)
    while True:
        before = len(found)
        for n in ast.walk(node):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
                if _is_profile(n.value, found):
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    found |= {t.id for tg in targets for t in ast.walk(tg) if isinstance(t, ast.Name)}
            elif isinstance(n, (ast.For, ast.comprehension)) and _is_profile(n.iter, found):
                found |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        if len(found) == before:
            return found


def _root(expr: ast.expr) -> str | None:
    """The name an argument is read off (`ctx` of `ctx`, `self` of `self.ctx`): handing it on hands that name's."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _reads_profile_of(node: ast.FunctionDef) -> set[str]:
    """Names off which the function reads a `.profile` (or `.plan`), however deep (`ctx.profile`, `self.ctx.plan`)."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in CARRIERS:
            root = n.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name):
                found.add(root.id)
    return found


def _local_types(qual: str, node: ast.FunctionDef) -> dict[str, str]:
    """The class each local name is: `self`'s, a parameter's by its annotation, a name built by calling a class."""
    types = {"self": qual.split(".")[0]} if "." in qual else {}
    for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
        if arg.annotation is not None:
            spelled = ast.unparse(arg.annotation).strip("'\"").removesuffix(" | None").strip("'\"")
            if spelled.isidentifier():
                types[arg.arg] = spelled
    for n in ast.walk(node):
        value = n.value if isinstance(n, ast.Assign) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id[:1].isupper():
            types.update({t.id: n.value.func.id for t in n.targets if isinstance(t, ast.Name)})
    return types


def _passed(callee: ast.FunctionDef, call: ast.Call) -> list[tuple[str, ast.expr]]:
    """(parameter, argument) of each argument the call passes, a method's receiver as its `self`."""
    params = [a.arg for a in (*callee.args.posonlyargs, *callee.args.args)]
    receiver = []
    if params and params[0] in ("self", "cls"):
        params = params[1:]
        if isinstance(call.func, ast.Attribute):
            receiver = [("self", call.func.value)]
    return [*receiver, *zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords if k.arg)]


def _bound(callee: ast.FunctionDef, call: ast.Call, tainted: set[str], holders: set[str]) -> set[str] | None:
    """The callee's parameters that receive the profile or a value built from it (empty where only a holder of it
    arrives, whole); None: the call does not pass the profile."""
    params = [a.arg for a in (*callee.args.posonlyargs, *callee.args.args)]
    values = set()
    if params and params[0] in ("self", "cls") and _receives(call, tainted):
        values.add(params[0])
    passed = _passed(callee, call)
    values |= {param for param, arg in passed if param != "self" and _carries(arg, tainted)}
    held = any(param in holders and isinstance(arg, (ast.Name, ast.Attribute)) for param, arg in passed)
    return values if values or held else None


def _receives(call: ast.Call, tainted: set[str]) -> bool:
    """The call is a method of the profile or of a value built from it."""
    if not isinstance(call.func, ast.Attribute):
        return False
    on = call.func.value
    return (isinstance(on, ast.Name) and on.id in tainted) or (isinstance(on, ast.Attribute) and on.attr in CARRIERS)


def profile_path(root: Path = BENCH, start: tuple[str, str] = START) -> _Follower:
    """The follower once it has walked from `start`."""
    follower = _Follower(_read(root))
    follower.files.append(start[0])
    follower.follow(*start, set())
    return follower


def test_the_profile_crosses_few_files():
    path = profile_path()
    files = sorted(set(path.files))
    print(f"\nprofile path from run_session: {len(files)} files, {path.returns} returns to a file already left")
    assert len(files) <= FILES_CEILING, f"{len(files)} files:\n" + "\n".join(files)
    assert path.returns <= RETURNS_CEILING, path.returns


def test_the_follower_counts_returns(tmp_path):
    package = tmp_path / "bench"
    package.mkdir()
    (package / "a.py").write_text(
        "from bench.b import one, two\n"
        "from bench.c import three\n"
        "def start(request):\n"
        "    plan = plan_for(request.profile)\n"
        "    one(plan)\n"
        "    three(7)\n"
        "    two(request)\n"
        "def plan_for(profile):\n"
        "    return profile\n"
    )
    (package / "b.py").write_text("def one(plan): ...\ndef two(request):\n    return request.profile\n")
    (package / "c.py").write_text("def three(n): ...\n")
    path = profile_path(package, ("bench.a", "start"))
    assert path.files == ["bench.a", "bench.b", "bench.a", "bench.b", "bench.a"]
    assert sorted(set(path.files)) == ["bench.a", "bench.b"]
    assert path.returns == 1
