"""Regression table for the math reward (one commented row per case), garbage-in and policy tests.

Run: ``.venv/bin/python -m pytest -q tests/test_math_reward.py``. Rows marked by their comment; add every
bug report as a row. Rows that need the slow path (sympy in a worker) are scored through the pool.
"""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

from rewardlab.rewards import ExtractionPolicy, MathReward, get_reward, math_reward, score_batch
from rewardlab.rewards.math.extract import extract_answer, extract_gold

GSM_GOLD_72 = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
               "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72")
GSM_GOLD_1200 = "The price is 3*400=<<3*400=1200>>1200 dollars.\n#### 1200"
MATH_GOLD_34 = "We have $x = \\frac{3}{4}$ since $4x = 3$. So the answer is $\\boxed{\\frac{3}{4}}$."

# (completion, gold, expected score, comment)
CASES = [
    # --- GSM8K-style chains and golds
    ("She sold 48/2 = 24 in May, so 48 + 24 = 72 in total.\n#### 72", GSM_GOLD_72, 1.0, "gsm8k #### on both sides"),
    ("She sold 24 in May and 72 in total.\n#### 72.0", GSM_GOLD_72, 1.0, "#### 72.0 equals 72"),
    ("So the total is 70.\n#### 70", GSM_GOLD_72, 0.0, "wrong #### answer"),
    ("Total: 24 + 48 = 72 clips. The answer is 72.", GSM_GOLD_72, 1.0, "answer phrase vs #### gold"),
    ("In total she sold 72 clips.", GSM_GOLD_72, 1.0, "no marker: last number of the last sentence"),
    ("She sold $72$ clips altogether.", GSM_GOLD_72, 1.0, "no marker: number in math"),
    ("The cost is $1,200.\n#### 1,200", GSM_GOLD_1200, 1.0, "thousands separator after ####"),
    ("#### $1200", GSM_GOLD_1200, 1.0, "currency sign after ####"),
    ("The answer is $1,200.00.", GSM_GOLD_1200, 1.0, "dollar amount with cents"),
    ("The answer is 1,201.", GSM_GOLD_1200, 0.0, "off by one"),
    ("First 3*400=1200. Then we subtract 200 to get 1000.\n#### 1000", GSM_GOLD_1200, 0.0,
     "final #### wins over chain numbers"),
    ("#### 72\n#### 73", GSM_GOLD_72, 0.0, "the last #### counts"),
    ("The answer is: 72", "72", 1.0, "answer colon"),
    ("**Answer:** 72", "72", 1.0, "markdown bold answer"),
    ("Final Answer: **72**", "72", 1.0, "final answer in bold"),
    ("Final Answer: The final answer is $72$. I hope it is correct.", "72", 1.0, "minerva format"),
    ("Final Answer: The final answer is 72. I hope it is correct.<|im_start|>user\nNext question: 5", "72", 1.0,
     "chat-template leak after the answer is cut"),
    ("The answer is 72 apples.", "72", 1.0, "unit word after the number"),
    ("The answer is 7.2", "72", 0.0, "decimal point misplaced"),
    ("The answer is -72", "72", 0.0, "sign matters"),
    ("The answer is -3.", "-3", 1.0, "negative integer with period"),
    ("The answer is −3", "-3", 1.0, "unicode minus"),
    # --- boxed extraction
    ("Thus $x = \\boxed{\\frac{3}{4}}$.", MATH_GOLD_34, 1.0, "boxed fraction vs MATH solution gold"),
    ("The answer is $\\frac{3}{4}$.", MATH_GOLD_34, 1.0, "answer phrase with inline fraction"),
    ("So $\\boxed{0.75}$", MATH_GOLD_34, 1.0, "decimal equals fraction exactly"),
    ("So $\\boxed{\\dfrac{3}{4}}$", "\\frac34", 1.0, "dfrac vs compact frac"),
    ("So $\\boxed{\\tfrac{6}{8}}$", "\\frac{3}{4}", 1.0, "unreduced fraction"),
    ("So $\\boxed{3/4}$", "\\frac{3}{4}", 1.0, "slash fraction"),
    ("So $\\boxed{\\frac{4}{3}}$", "\\frac{3}{4}", 0.0, "inverted fraction"),
    ("$\\boxed{75\\%}$", "\\frac{3}{4}", 1.0, "percent of a fraction"),
    ("The answer is $\\fbox{7}$.", "7", 1.0, "fbox"),
    ("The answer is \\boxed 7.", "7", 1.0, "boxed without braces"),
    ("$\\boxed{\\boxed{5}}$", "5", 1.0, "nested boxes"),
    ("First $\\boxed{2}$. Wait, actually $\\boxed{3}$.", "3", 1.0, "self-correction: last box wins"),
    ("First $\\boxed{2}$. Wait, actually $\\boxed{3}$.", "2", 0.0, "self-correction: earlier box not paid"),
    ("<think>Maybe \\boxed{8}?</think> The answer is $\\boxed{9}$.", "9", 1.0, "box inside think is ignored"),
    ("<think>So \\boxed{8}.</think> Final: $\\boxed{9}$.", "8", 0.0, "think answer not paid"),
    ("The interest is $\\boxed{200}$, so in total $10,200 + 255 = 10,455$. The final answer is $10,455$.", "10455", 1.0,
     "answer phrase after an intermediate box"),
    ("The answer is $\\boxed{}$.", "0", 0.0, "empty box"),
    ("$\\boxed{-3}$", "-3", 1.0, "negative boxed"),
    ("$\\boxed{14{,}916}$", "14916", 1.0, "braced thousands separator"),
    ("$\\boxed{10,\\!080}$", "10080", 1.0, "thin-space thousands separator"),
    ("$\\boxed{1,000}$", "1000", 1.0, "comma thousands in box"),
    ("$\\boxed{\\$18.00}$", "18", 1.0, "escaped dollar and cents"),
    ("\\[\\boxed{2\\sqrt{5}}\\]", "\\sqrt{20}", 1.0, "simplified radical"),
    ("\\[\\boxed{2\\sqrt{5}}\\]", "\\sqrt{10}", 0.0, "different radical"),
    ("$\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{1}{2}\\sqrt{3}", 1.0, "radical placement"),
    ("$\\boxed{\\frac{\\sqrt{2}}{2}}$", "\\frac{1}{\\sqrt{2}}", 1.0, "rationalised denominator"),
    ("$\\boxed{3\\sqrt{13}}$", "3\\sqrt{13}", 1.0, "identical radical"),
    ("$\\boxed{4\\sqrt{2}}$", "4", 0.0, "extra radical factor"),
    ("$\\boxed{2}$ is the number of solutions", "2", 1.0, "box followed by prose"),
    # --- numbers
    ("$\\boxed{1000.0}$", "1000", 1.0, "trailing .0"),
    ("$\\boxed{.5}$", "0.5", 1.0, "leading-dot decimal"),
    ("$\\boxed{2.50}$", "2.5", 1.0, "trailing zero"),
    ("$\\boxed{1.0000001}$", "1", 0.0, "close but not equal"),
    ("$\\boxed{0.333333}$", "\\frac{1}{3}", 1.0, "six-digit decimal approximates 1/3"),
    ("$\\boxed{0.33}$", "\\frac{1}{3}", 0.0, "two-digit decimal is not 1/3"),
    ("$\\boxed{3.14}$", "\\pi", 0.0, "3.14 is not pi"),
    ("$\\boxed{\\frac{22}{7}}$", "\\pi", 0.0, "22/7 is not pi"),
    ("$\\boxed{2\\frac{1}{2}}$", "\\frac52", 1.0, "mixed number"),
    ("$\\boxed{0.\\overline{3}}$", "\\frac13", 1.0, "repeating decimal"),
    ("$\\boxed{3.2 \\times 10^{5}}$", "320000", 1.0, "scientific notation"),
    ("$\\boxed{3.2e5}$", "3.2\\times10^5", 1.0, "e-notation"),
    ("$\\boxed{1E-4}$", "0.0001", 1.0, "negative exponent"),
    ("$\\boxed{6.2 \\times 10^{23}}$", "6.02 \\times 10^{23}", 0.0, "mantissa differs"),
    ("$\\boxed{5\\times10^{-9}}$", "5\\times10^{-8}", 0.0, "exponent differs"),
    ("$\\boxed{10^{-20}}$", "0", 0.0, "tiny is not zero"),
    ("$\\boxed{1 000}$", "1000", 1.0, "space thousands separator"),
    ("$\\boxed{004}$", "4", 1.0, "leading zeros (AIME style)"),
    ("$\\boxed{7}$", "\\frac{7}{1}", 1.0, "integer over one"),
    ("$\\boxed{\\frac{-7}{4}}$", "-\\frac{7}{4}", 1.0, "sign placement in fraction"),
    ("$\\boxed{-0.5}$", "-\\frac{1}{2}", 1.0, "negative decimal vs fraction"),
    ("$\\boxed{12^{\\text{th}}}$", "12", 1.0, "ordinal suffix"),
    # --- percentages
    ("The answer is $28\\%$.", "28\\%", 1.0, "percent equal"),
    ("The answer is 28 percent.", "28\\%", 1.0, "percent word"),
    ("The answer is $0.28$.", "28\\%", 1.0, "fraction form of a percent"),
    ("The answer is $28$.", "28\\%", 1.0, "percent sign omitted"),
    ("The answer is $0.28\\%$.", "28\\%", 0.0, "0.28% is not 28%"),
    ("The answer is $27\\%$.", "28\\%", 0.0, "wrong percent"),
    ("The answer is $0.3$.", "3\\%", 0.0, "0.3 is not 3%"),
    ("The answer is $50\\%$.", "\\frac{1}{2}", 1.0, "percent vs fraction gold"),
    ("The answer is $7.41\\%$.", "7.41\\%", 1.0, "decimal percent"),
    # --- units and degrees
    ("$\\boxed{45 \\text{ mph}}$", "45", 1.0, "text unit"),
    ("$\\boxed{15\\mbox{ cm}^2}$", "15", 1.0, "mbox unit with power"),
    ("$\\boxed{7\\,\\text{kg}}$", "7", 1.0, "thin space unit"),
    ("$\\boxed{1.5\\text{ L}}$", "1.5", 1.0, "single-letter unit in text"),
    ("$\\boxed{90^\\circ}$", "90", 1.0, "degrees"),
    ("$\\boxed{90^{\\circ}}$", "90^\\circ", 1.0, "degrees braced"),
    ("The angle is $80$ degrees.", "80", 1.0, "degree word"),
    ("$\\boxed{15 \\text{ cm}}$", "150", 0.0, "unit does not rescale"),
    ("$\\boxed{125\\textnormal{ miles}}$", "$125$ miles", 1.0, "textnormal unit vs unit gold"),
    ("$\\boxed{0.06 \\text{ yuan}}$", "0.06 \\text{ yuan}", 1.0, "currency word"),
    # --- expressions, polynomials
    ("$\\boxed{2-2p}$", "2-2p", 1.0, "linear expression"),
    ("$\\boxed{-2p+2}$", "2-2p", 1.0, "reordered terms"),
    ("$\\boxed{a^2 + 2ab + b^2}$", "(a+b)^2", 1.0, "expanded square"),
    ("$\\boxed{a^2 + b^2}$", "(a+b)^2", 0.0, "freshman's dream"),
    ("$\\boxed{x^2+1}$", "(x-1)(x+1)", 0.0, "wrong factorisation"),
    ("$\\boxed{(x-2)(x+2)}$", "x^2-4", 1.0, "difference of squares"),
    ("$\\boxed{\\frac{x}{7}+\\frac{2}{7}}$", "\\frac{x+2}{7}", 1.0, "split fraction"),
    ("$\\boxed{\\frac94\\pi}$", "\\frac{9}{4}\\pi", 1.0, "pi multiple, compact frac"),
    ("$\\boxed{2\\pi}$", "\\pi", 0.0, "wrong pi multiple"),
    ("$\\boxed{e^2}$", "2e", 0.0, "e squared is not 2e"),
    ("$\\boxed{5!}$", "120", 1.0, "factorial"),
    ("$\\boxed{\\sqrt[3]{27}}$", "3", 1.0, "cube root"),
    ("$\\boxed{27^{1/3}}$", "3", 1.0, "fractional power"),
    ("$\\boxed{2^{10}}$", "1024", 1.0, "power"),
    ("$\\boxed{1 - \\frac{1}{\\mathrm{e}}}$", "1 - \\frac{1}{e}", 1.0, "mathrm e"),
    ("$\\boxed{1 + \\frac{1}{e}}$", "1 - \\frac{1}{e}", 0.0, "sign of the e term"),
    ("$\\boxed{\\sin(a+b) - \\sin(a-b)}$", "2\\sin b\\cos a", 1.0, "trig identity (sympy)"),
    ("$\\boxed{\\log_2 8}$", "3", 1.0, "logarithm (sympy)"),
    ("$\\boxed{\\log_2 9}$", "3", 0.0, "wrong logarithm (sympy)"),
    ("$\\boxed{\\binom{5}{3}}$", "10", 1.0, "binomial (sympy)"),
    ("$\\boxed{-1 + \\exp(16)}$", "e^{16} - 1", 1.0, "exp notation"),
    ("The answer is pi/2.", "\\dfrac{\\pi}{2}", 1.0, "plain-text pi"),
    # --- complex numbers
    ("$\\boxed{3+4i}$", "4i+3", 1.0, "complex reordered"),
    ("$\\boxed{1+i}$", "1-i", 0.0, "conjugate"),
    ("$\\boxed{i^2}$", "-1", 1.0, "i squared"),
    ("$\\boxed{\\frac{1}{2} + \\frac{\\sqrt{3}}{2}i}$", "\\frac{1+i\\sqrt{3}}{2}", 1.0, "complex with radical"),
    # --- equations and assignments
    ("$\\boxed{x = 5}$", "5", 1.0, "assignment vs value"),
    ("$\\boxed{5}$", "x = 5", 1.0, "value vs assignment gold"),
    ("$\\boxed{k = 8}$", "7", 0.0, "wrong assignment"),
    ("$\\boxed{0}$", "a + 3z = 0", 0.0, "value vs a real equation"),
    ("$\\boxed{y = 2x + 3}$", "y=2x+3", 1.0, "same line"),
    ("$\\boxed{2x - y + 3 = 0}$", "y=2x+3", 1.0, "line rearranged (sympy)"),
    ("$\\boxed{y = -2x + 3}$", "y = 2x + 3", 0.0, "different slope"),
    ("$\\boxed{(p,q) = (3,2)}$", "(3,2)", 1.0, "tuple assignment"),
    ("$\\boxed{7:32}$", "S_{MBCN}:S=7:32", 1.0, "ratio assignment"),
    ("$\\boxed{4:3}$", "3:4", 0.0, "inverted ratio"),
    # --- intervals, inequalities
    ("$\\boxed{[-3, 2]}$", "[-3,2]", 1.0, "closed interval"),
    ("$\\boxed{(2, 5)}$", "[2,5)", 0.0, "endpoint inclusion differs"),
    ("$\\boxed{(\\frac{1}{2}, 3]}$", "(0.5, 3]", 1.0, "interval with fraction endpoint"),
    ("$\\boxed{[2,\\infty)\\cup(-\\infty,-3]}$", "(-\\infty, -3] \\cup [2, \\infty)", 1.0, "union reordered (sympy)"),
    ("$\\boxed{[0, \\infty)}$", "(0, \\infty)", 0.0, "zero included or not"),
    ("$\\boxed{x \\geq 3}$", "x \\ge 3", 1.0, "geq vs ge"),
    ("$\\boxed{x < 5}$", "x > 5", 0.0, "inequality direction"),
    ("$\\boxed{(-\\infty, 3)}$", "x<3", 1.0, "interval vs inequality"),
    # --- sets, tuples, lists
    ("$\\boxed{\\{-2, 1\\}}$", "\\{1,-2\\}", 1.0, "set order"),
    ("$\\boxed{\\{1, 2\\}}$", "\\{1, 2, 3\\}", 0.0, "missing element"),
    ("The roots are $\\boxed{-2,1}$.", "-2,1", 1.0, "bare list"),
    ("The roots are $\\boxed{1,-2}$.", "-2, 1", 1.0, "bare list reordered"),
    ("$\\boxed{2, 3, 5}$", "2, 3, 5, 7", 0.0, "incomplete list"),
    ("$\\boxed{1, 5, 7}$", "1, 5", 0.0, "extra element"),
    ("$x = 1$ or $x = -2$, so $\\boxed{x = 1 \\text{ or } x = -2}$", "\\{1,-2\\}", 1.0,
     "or-list of assignments vs set"),
    ("$\\boxed{(2, -5)}$", "(2,-5)", 1.0, "point"),
    ("$\\boxed{(-5, 2)}$", "(2,-5)", 0.0, "swapped coordinates"),
    ("$\\boxed{(0.5, 1.5)}$", "\\left(\\frac12, \\frac32\\right)", 1.0, "point with decimals vs fractions"),
    ("$\\boxed{(3, \\frac{\\pi}{2})}$", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0, "polar point"),
    ("\\boxed{1} and \\boxed{2} and \\boxed{3}", "\\{1,2,3\\}", 1.0, "several boxes joined by and"),
    ("$\\boxed{(7,11)}$ and $\\boxed{(11,7)}$", "(11,7), (7,11)", 1.0, "two boxed tuples"),
    ("$\\boxed{1331 \\text{ and } 1728}$", "1331, 1728", 1.0, "and-list"),
    ("$\\boxed{1728}$", "1331 \\text{ and } 1728", 0.0, "one of two answers"),
    ("$\\boxed{2}$", "2, -2", 0.0, "one root of two"),
    ("$\\boxed{1, 3, 5, \\ldots, 2n-1}$", "1, 2, \\ldots, n", 0.0, "different patterns"),
    ("$\\boxed{1 \\pm \\sqrt{19}}$", "1 + \\sqrt{19}, 1 - \\sqrt{19}", 1.0, "plus-minus vs list (sympy)"),
    # --- matrices
    ("$\\boxed{\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}}$", "\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}",
     1.0, "pmatrix vs bmatrix"),
    ("$\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}}$", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
     0.0, "one entry differs"),
    ("$\\boxed{\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}}$",
     "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\end{pmatrix}", 1.0, "vector entries as fractions"),
    # --- text answers and choices
    ("Therefore $\\boxed{\\text{Evelyn}}$ is our answer.", "\\text{Evelyn}", 1.0, "name"),
    ("$\\boxed{\\text{Briana}}$", "\\text{Evelyn}", 0.0, "wrong name"),
    ("$\\boxed{\\text{(C)}}$", "C", 1.0, "choice letter in text"),
    ("The correct option is $\\boxed{\\textbf{(D)}}$.", "\\text{(D)}", 1.0, "bold choice"),
    ("$\\boxed{\\text{(A)}}$", "\\text{(C)}", 0.0, "wrong choice"),
    ("$\\boxed{\\text{Yes}}$", "\\text{yes}", 1.0, "case-insensitive yes"),
    ("$\\boxed{\\text{odd}}$", "\\text{even}", 0.0, "odd vs even"),
    ("$\\boxed{\\text{East}}$", "\\text{east}", 1.0, "direction word"),
    ("The meeting falls on a $\\boxed{\\text{Friday}}$.", "\\text{Friday}", 1.0, "weekday"),
    # --- reward hacking and missing answers
    ("The answer is $\\boxed{1}$ or $\\boxed{2}$ or $\\boxed{3}$ or $\\boxed{4}$.", "2", 0.0,
     "several boxed candidates"),
    ("$\\boxed{5 \\text{ or } 6}$", "5", 0.0, "two candidates in one box"),
    ("$\\boxed{1,2,3,4,5,6,7,8,9,10}$", "5", 0.0, "every candidate in one box"),
    ("$\\boxed{5 \\pm 1}$", "5", 0.0, "plus-minus hedge"),
    ("$\\boxed{[0, 10]}$", "5", 0.0, "an interval that contains the answer"),
    ("$\\boxed{\\frac{10}{2} + \\frac{1}{1000000}}$", "5", 0.0, "almost the answer"),
    ("The answer is between 1 and 10.", "5", 0.0, "range instead of an answer"),
    ("The answer is 4 or 5.", "5", 0.0, "two candidates in the answer phrase"),
    ("\\boxed{3} hmm \\boxed{4} hmm \\boxed{5} hmm \\boxed{6}", "6", 0.0, "box spam"),
    ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "20", 0.0, "number spam"),
    ("The answer is $\\boxed{x}$.", "5", 0.0, "variable instead of a value"),
    ("$\\boxed{\\text{answer}}$", "5", 0.0, "placeholder word"),
    ("I don't know.", "5", 0.0, "no answer at all"),
    # --- later additions (each was a bug or a slow-path trip once)
    ("$\\boxed{1112122_3}$", "1112112_3", 0.0, "base-3 numerals differ"),
    ("$\\boxed{204_5}$", "54", 1.0, "base-5 numeral vs decimal"),
    ("$\\boxed{\\lceil 3.2 \\rceil}$", "3", 0.0, "ceiling"),
    ("$\\boxed{\\lfloor 3.7 \\rfloor}$", "3", 1.0, "floor"),
    ("$\\boxed{|-7|}$", "7", 1.0, "absolute value"),
    ("$\\boxed{\\tan(\\pi/3)}$", "\\frac{\\sqrt{3}}{3}", 0.0, "tan(pi/3) is sqrt 3, not its inverse"),
    ("$\\boxed{\\sqrt{17}}$", "4.123105625617661", 1.0, "radical vs long decimal"),
    ("$\\boxed{(-\\infty, 2) \\cup (2, \\infty)}$", "\\mathbb{R}", 0.0, "a point is missing from the reals"),
    ("$\\boxed{(-\\infty, 2] \\cup [2, \\infty)}$", "\\mathbb{R}", 1.0, "touching closed intervals cover the reals"),
    ("$\\boxed{[0,1) \\cup [1,2]}$", "[0,2]", 1.0, "adjacent intervals merge"),
    ("$\\boxed{\\{1,3\\}}$", "(3,1)", 0.0, "a set is not a reversed ordered pair"),
    ("$\\boxed{(7,11)or(11,7)}$", "(11,7), (7,11)", 1.0, "glued 'or' between tuples"),
    ("$\\boxed{(12,102)}$", "(12, 102)", 1.0, "comma inside a pair is not a thousands separator"),
    ("$\\boxed{x \\in [-2,7]}$", "-2 \\le x \\le 7", 1.0, "membership vs double inequality"),
    ("$\\boxed{x \\ge 1}$", "(1, \\infty)", 0.0, "closed vs open endpoint"),
    ("$\\boxed{\\frac{x^2}{16} + \\frac{y^2}{12} = \\frac14}$", "\\frac{x^2}{4} + \\frac{y^2}{3} = 1", 1.0,
     "ellipse equation scaled"),
    ("$\\boxed{5x - 7y + 11z + 4 = 0}$", "x + y - z + 2 = 0", 0.0, "different planes"),
    ("$\\boxed{F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}}$", "F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}", 1.0,
     "identical symbolic sum"),
    ("$\\boxed{(x+1)^{1000}}$", "(1+x)^{1000}", 1.0, "huge power kept unexpanded"),
    # --- adversarial inputs that must neither hang nor be paid wrongly
    ("$\\boxed{9^{9^{9^{9}}}}$", "3", 0.0, "power tower, compared by magnitude"),
    ("$\\boxed{9^{9^{9^{9}}}}$", "9^{9^{9^{9}}}", 1.0, "identical power tower"),
    ("$\\boxed{(10^{9})!}$", "1", 0.0, "huge factorial"),
    ("$\\boxed{\\frac{1}{0}}$", "1", 0.0, "division by zero"),
    ("$\\boxed{\\frac{1}{2006!}}$", "\\frac{1}{2004!}", 0.0, "close tiny numbers compared exactly"),
    ("$\\boxed{" + "(" * 500 + "7" + ")" * 500 + "}$", "7", 1.0, "deep redundant parentheses"),
    ("1e99999999", "5", 0.0, "outside fuzzer: a 10-character exponent that never returned (bounded.decimal)"),
    ("2e5000000", "-7", 0.0, "5.8 s before: a 5-million-digit literal, now a magnitude"),
    # --- decimal commas, leading zeros and thousands separators (README, "Decimal commas"); issue 22
    ("111", "0,111", 0.0, "a first group of 0 is never thousands: 0,111 is 0.111"),
    ("500", "0,500", 0.0, "0,500 (one half, European) is not 500"),
    ("0,500", "500", 0.0, "the same, as the prediction"),
    ("01,000", "1000", 0.0, "a leading zero is never a thousands-separated integer"),
    ("0,5", "0.5", 1.0, "a decimal comma against a single value"),
    ("0{,}5", "\\frac12", 1.0, "LaTeX's decimal comma"),
    ("1000,99", "1000.99", 1.0, "Math-Verify's decimal comma case"),
    ("1,5", "1.5", 1.0, "not thousands (a group of 1): a decimal comma against a single value"),
    ("1,5", "15", 0.0, "1,5 is never 15"),
    ("$\\boxed{1,5}$", "1, 5", 1.0, "against a list it is the pair 1, 5"),
    ("$\\boxed{6,8}$", "6 \\text{ and } 8", 1.0, "against 'a and b' too"),
    ("1,500", "1500", 1.0, "a valid thousands separator still reads as thousands"),
    ("1,500", "1.5", 0.0, "so 1,500 is not one and a half"),
    ("12,345,678", "12345678", 1.0, "several groups"),
    ("1 000", "1000", 1.0, "a space as the separator"),
    ("0 500", "500", 0.0, "but not after a leading 0"),
    # --- one extraction policy: the slow path grades the extracted answer whole (issue 22)
    (" 3\ufffdqI 4(Ganswer\ufffd00\ufffd\ufffd", "4", 0.0,
     "random-model junk: math-verify used to pick the 4 out of it"),
    (" 4(Ganswer\ufffd", "4", 0.0, "the same junk with the right number first"),
    # --- extraction from real completions (tests/data/real_completions.jsonl; issue 22)
    ("4 + 6 equals 10.", "10", 1.0, "'equals' states a result: was compared as text"),
    ("9 + 4 is 13.", "13", 1.0, "'is' after an arithmetic expression states a result"),
    ("The answer is simply 10.", "10", 1.0, "a filler word after the answer phrase"),
    ("So the answer is 10, because adding 8 and 2 is like adding 2.", "10", 1.0,
     "the phrase's number, not its sentence's last"),
    ("\\boxed{N} is 8 + 2, a total of 10.", "10", 1.0, "a box holding the prompt's placeholder is no answer"),
    ("4 + 6 = 10\n\nI added 4 and 6 to get it.", "10", 1.0,
     "later numbers that only repeat the operands do not override"),
    ("3 + 7 is incorrect.", "10", 0.0, "the restated question is not evaluated for the model"),
    ("The answer is: 3 + 7", "10", 0.0, "an unevaluated expression is not its result"),
    ("To find the total we take the 10 boxes in the store and then we need to multiply them by", "10", 0.0,
     "never answers: a truncated sentence's number, many words before its end, is not paid"),
    ("You know, the \"10\" way. Detect the difference. A prefix? Limit.\nTell me a story", "10", 0.0,
     "a number in an early sentence, followed by junk, is not a conclusion"),
    ("5 + 5 = 10, but actually the answer would be 11.", "10", 0.0, "a later answer phrase overrides the equation"),
    ("He has 5 apples. He eats 2. So he has 3.", "3", 1.0, "a conclusion sentence with a new number"),
    ("Therefore, there are 12 distinct sequences that meet the conditions. I hope it is correct.", "12", 1.0,
     "a sentence opened by 'Therefore' concludes, whatever follows the number"),
    ("He had 3 apples and 4 pears, 7 fruits.\nSo he has 3 apples.", "3", 0.0,
     "a 'conclusion' that only repeats a number already written is a mention, not an answer"),
    ("so the total is 2,74 dollars", "74", 0.0, "a decimal comma is not split: 74 is not the last number of '2,74'"),
    # --- issue 22, second pass: the labelled real completions and the differential fuzzer's classes
    ("9 + 4 = 13\n\nSo, 9 + 4 is 13.\n\nI've made a mistake in the previous step. It should be 9 + 9.", "13", 0.0,
     "a result withdrawn by what follows it ('I've made a mistake') is no answer"),
    ("Mixing numbers (8 + 2 = 10), is somewhat misleading. The user states the actual number.", "10", 0.0,
     "a result called misleading is no answer, and its number is not paid as the sentence's last"),
    ("3 + 6 is 9, but in this session math is based on rules that include exaggerations.", "9", 1.0,
     "'but' alone retracts nothing"),
    ("But the most important example is actually: 4 + 4 = 8, 8 x", "8", 0.0, "cut mid-formula: no answer stated"),
    ("Both sides can be expressed as 2 + 2, I add them together to get 4. Here is the difference:\n\n(2 + 2) - (2 + 2) "
     "= ", "4", 1.0,
     "a trailing '=' is not an unfinished answer: the result before it stands"),
    ("The answer would be 15, which is only true when you add 8 and 7. So, the answer would actually", "15", 0.0,
     "a completion that ends announcing its answer was cut before stating it"),
    ("The answer is A.", "A", 1.0, "an answer phrase with its answer is no announcement"),
    ("Three is indeed 6 and ten.", "6", 0.0, "a number offered with a second value in words is ambiguous"),
    ("I think 15 is incorrect.", "15", 0.0, "a number the text calls incorrect is no answer"),
    ("The answer is not 15.", "15", 0.0, "a negated answer phrase is no answer"),
    ("Not $15$.", "15", 0.0, "a bare 'Not N' is no answer"),
    ("not it's not 10 it's 1,000.99m²", "1000.99", 1.0,
     "a leading 'not' that negates another value does not negate the answer"),
    ("234 thousand", "234", 0.0, "a scale word multiplies: 234000"),
    ("0.5 thousand", "500", 1.0, "0.5 thousand is 500, exactly"),
    ("2 dozen eggs", "24", 1.0, "a scale word, then a unit"),
    ("16 50", "1650", 0.0, "two numbers, not a thousands grouping"),
    ("1 650", "1650", 1.0, "a valid space grouping is a thousands separator"),
    ("-9 1", "-9", 0.0, "two numbers side by side are not their product"),
    ("$\\log_2 8$", "3", 1.0, "a subscript digit and its argument are not two numbers side by side"),
    ("204_5", "54", 1.0, "a base numeral is its value"),
    ("204_55", "204_5", 0.0, "there is no base 55: never read as its digits"),
    ("It is not 52_8, it is 42_8.", "52_8", 0.0, "the last number keeps its base subscript (42_8 is 34)"),
    ("$x^2/4 + y^2/3 = 1$", "$x^2/4 + y^2/3 = 1$", 1.0, "'2/3 = 1' inside an equation is no result statement"),
    ("5\u200b40", "540", 1.0, "a zero-width space is invisible"),
    ("$\x0crac{3}{4}$", "\\frac{3}{4}", 1.0, "a form feed before 'rac' is \\frac eaten by a string escape"),
    ("answer{xZ 1 )ing 3360", "3360", 0.0, "junk: sub-words glued to symbols, two numbers"),
    (":_Z= 3   = 2928", "2928", 0.0, "a chain '3 = 2928' not headed by a variable is no derivation"),
    ("$x = 5+5+1 = 7 =11$", "$x = 11$", 1.0, "a variable's chain is compared by its last member"),
]


@pytest.fixture(scope="module")
def scored() -> list:
    """Score the whole table in one batch (slow-path rows go to the worker pool)."""
    return score_batch(math_reward, [c[0] for c in CASES], [c[1] for c in CASES], deadline=5.0)


def test_table_size() -> None:
    assert len(CASES) >= 150


@pytest.mark.parametrize("idx", range(len(CASES)), ids=[c[3] for c in CASES])
def test_case(idx: int, scored: list) -> None:
    completion, gold, expected, comment = CASES[idx]
    r = scored[idx]
    assert r.score == expected, f"{comment}: got {r.score} ({r.info})"
    assert "status" in r.info and "rule" in r.info


def test_direct_call_matches_batch(scored: list) -> None:
    for i in range(0, len(CASES), 7):
        r = math_reward(CASES[i][0], CASES[i][1])
        assert r.score == scored[i].score, CASES[i][3]


# ---------------------------------------------------------------- info and policy

def test_info_explains_fast_decision() -> None:
    r = math_reward("So the answer is $\\boxed{\\frac{3}{4}}$.", "0.75")
    assert r.score == 1.0
    assert r.info["status"] == "ok"
    assert r.info["pred"] == "\\frac{3}{4}" and r.info["gold"] == "0.75"
    assert r.info["extraction"] == "boxed"
    assert r.info["rule"] == "fast_fraction"


def test_info_integer_rule_and_hash_extraction() -> None:
    r = math_reward("6 * 12 = 72\n#### 72", GSM_GOLD_72)
    assert (r.score, r.info["rule"], r.info["extraction"]) == (1.0, "string", "hash")
    r = math_reward("#### 72.0", GSM_GOLD_72)
    assert (r.score, r.info["rule"]) == (1.0, "fast_int")


def test_refusals_have_reasons() -> None:
    r = math_reward("\\boxed{1} so \\boxed{2} then \\boxed{3} but \\boxed{4}", "4")
    assert r.score == 0.0 and r.info["status"] == "box_spam" and "detail" in r.info
    r = math_reward("The answer is 4 or maybe 5 depending on rounding.", "5")
    assert r.score == 0.0 and r.info["status"] == "ambiguous"
    r = math_reward("The answer is 4 or 5.", "5")  # issue 40: two values offered as alternatives are a hedge
    assert r.score == 0.0 and r.info["status"] == "hedge" and r.info["commitment"] == "hedge"
    r = math_reward("Let me think about this problem.", "5")
    assert r.score == 0.0 and r.info["status"] == "no_answer"


def test_policy_is_configurable() -> None:
    lenient = MathReward(ExtractionPolicy(max_distinct_boxes=0, commitment=False))  # issue 40: else a hedge
    text = "\\boxed{1} so \\boxed{2} then \\boxed{3} but \\boxed{4}"
    assert lenient(text, "4").score == 1.0
    assert math_reward(text, "4").score == 0.0
    strict = MathReward(ExtractionPolicy(use_phrase=False, fallback="none"))
    assert strict("The answer is 5.", "5").info["status"] == "no_answer"
    assert math_reward("The answer is 5.", "5").score == 1.0


def test_scores_are_configurable() -> None:
    r = MathReward(correct_score=2.0, wrong_score=-1.0)
    assert r("\\boxed{5}", "5").score == 2.0
    assert r("\\boxed{6}", "5").score == -1.0


def test_registry_and_pickling() -> None:
    assert get_reward("math") is math_reward
    assert math_reward.name == "math"
    assert pickle.loads(pickle.dumps(math_reward)) is math_reward
    custom = MathReward(ExtractionPolicy(max_distinct_boxes=5), timeout=2.0, timeout_score=-1.0)
    back = pickle.loads(pickle.dumps(custom))
    assert back.policy == custom.policy and back.timeout == 2.0 and back.timeout_score == -1.0


def test_reference_dict_and_numeric_gold() -> None:
    assert math_reward("\\boxed{72}", {"answer": "72"}).score == 1.0
    assert math_reward("\\boxed{72}", 72).score == 1.0
    assert math_reward("\\boxed{0.5}", 0.5).score == 1.0


def test_extraction_helpers() -> None:
    assert extract_answer("so \\boxed{1} and \\boxed{2}").answer == "1, 2"
    assert extract_gold(GSM_GOLD_72).answer == "72"
    assert extract_gold(MATH_GOLD_34).answer == "\\frac{3}{4}"
    assert extract_gold("\\boxed{1} no no no no no \\boxed{2}").answer == "2"


# ---------------------------------------------------------------- garbage in

GARBAGE = [
    None,
    "",
    "   \n\t ",
    "x" * 1_000_000,
    "\\boxed{" * 2000,
    "}" * 5000 + "\\boxed{5",
    "\\frac{\\frac{\\frac{",
    bytes(range(256)).decode("latin-1") * 200,
    "\x00\x01\x02\\boxed{\x00}",
    "$" * 10_000,
    "\\boxed{" + "1+" * 50_000 + "1}",
    12345,
    ["not", "text"],
]


@pytest.mark.parametrize("junk", GARBAGE, ids=[f"junk{i}" for i in range(len(GARBAGE))])
def test_garbage_completion_gives_a_reason(junk) -> None:
    r = math_reward(junk, "5")
    assert r.score in (0.0, 1.0)
    assert isinstance(r.info["status"], str) and r.info["status"]
    if r.score == 0.0 and r.info["status"] == "ok":
        assert r.info.get("rule")


@pytest.mark.parametrize("junk", [None, "", "\\boxed{", "}" * 100, {"no": "answer"}], ids=lambda j: repr(j)[:12])
def test_garbage_gold_is_not_gradable(junk) -> None:
    r = math_reward("\\boxed{5}", junk)
    assert r.info["status"] in ("bad_gold", "gold_parse_error", "ok")
    if r.info["status"] != "ok":
        assert r.score is None


# ---------------------------------------------------------------- threads and asyncio

def test_works_from_threads_and_asyncio() -> None:
    results: list = []

    def worker() -> None:
        results.append(math_reward("$\\boxed{\\sin(\\pi/6)}$", "\\frac12").score)
        results.append(math_reward("\\boxed{3}", "3").score)

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [1.0] * 6

    async def main() -> float:
        return await asyncio.to_thread(math_reward, "$\\boxed{\\sin(\\pi/6)}$", "\\frac12")

    assert asyncio.run(main()).score == 1.0


# ---------------------------------------------------------------- the CLI

def test_cli_explains_a_score(tmp_path) -> None:
    from click.testing import CliRunner

    from rewardlab.commands.reward import reward

    runner = CliRunner()
    out = runner.invoke(reward, ["math", "--completion", "So $\\boxed{\\frac34}$.", "--gold", "0.75"])
    assert out.exit_code == 0, out.output
    assert "score=1" in out.output and "rule='fast_fraction'" in out.output
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"completion": "#### 5", "gold": "5"}\n{"completion": "#### 6", "gold": "5", "meta": {}}\n')
    out = runner.invoke(reward, ["math", "--file", str(rows), "--json"])
    assert out.exit_code == 0, out.output
    lines = [__import__("json").loads(x) for x in out.output.splitlines()]
    assert [x["score"] for x in lines] == [1.0, 0.0] and lines[0]["info"]["status"] == "ok"


@pytest.mark.parametrize("args, message", [
    (["math"], "give --completion"),
    (["math", "--file", "/nonexistent.jsonl"], "no such file"),
    (["nosuch", "-c", "a", "-g", "b"], "unknown reward"),
])
def test_cli_bad_input_is_one_line(args, message) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rewardlab", "reward", *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content, args, message", [
    (b'{"completion": "x"\n', [], "rows.jsonl:1: not valid JSON"),
    (b'{"completion": "x", "gold": "1"}\n[1]\n', [], "rows.jsonl:2: each row needs"),
    (b"\xff\xfe\n", [], "not UTF-8 text"),
    (b'{"completion": "x", "gold": "1"}\n', ["--deadline", "soon"], "Invalid value for '--deadline'"),
])
def test_cli_bad_file_is_one_line(tmp_path, capsys, content, args, message) -> None:
    from rewardlab.cli import main

    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["reward", "math", "--file", str(rows), *args])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2
    assert err.startswith("error: ") and message in err and "\n" not in err
